"""Local server processes, each in its own process group: started with a log file, waited for,
and stopped by PID. The demo's deployment (`cdf_platform.demo.deployment`), its local S3 server,
and the test kit's servers use them.

Example:
    >>> service = Service("engine", ["cdf-platform", "engine"], Path("/tmp/engine.log"))
    >>> service.alive()
    False
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_TIMEOUT_SECONDS = 180.0


def stop_process(process: subprocess.Popen[Any], timeout: float, *, group: bool = False) -> None:
    """Stop `process` by its PID (its whole process group with `group`, which `process` leads):
    SIGTERM, then SIGKILL if it has not exited within `timeout` seconds. With `group`, return
    only once no process of the group is left (a worker may outlive its parent by moments). A
    process that has exited is left alone."""
    if process.poll() is not None and not (group and group_alive(process.pid)):
        return
    send = os.killpg if group else os.kill
    deadline = time.monotonic() + timeout
    _signal(send, process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _signal(send, process.pid, signal.SIGKILL)
        process.wait()
    while group and group_alive(process.pid):
        if time.monotonic() > deadline + timeout:
            return  # what is left is a zombie waiting for its new parent to reap it
        if time.monotonic() > deadline:
            _signal(send, process.pid, signal.SIGKILL)
        time.sleep(0.02)


def _signal(send: Callable[[int, int], None], pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        send(pid, number)


def group_alive(group: int) -> bool:
    """Whether a process of process group `group` still exists."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def answers_http(endpoint: str) -> bool:
    """Whether an HTTP server answers at `endpoint` (any status: an error page is an answer)."""
    try:
        with urllib.request.urlopen(f"{endpoint}/", timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on `host:port`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0


@dataclass
class Service:
    """One long-running process (its own process group), its output in `log`."""

    name: str
    command: list[str]
    log: Path
    cwd: Path | None = None
    process: subprocess.Popen[bytes] | None = None

    def start(self, env: Mapping[str, str | None]) -> None:
        """Start it with this process's environment updated by `env` (a None value: the
        variable is removed)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        merged = {**os.environ, **env}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env={name: value for name, value in merged.items() if value is not None},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_until(self, ready: Callable[[], bool], timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Wait until `ready()`; raise RuntimeError (with the log's tail) when the process
        exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while not ready():
            if not self.alive():
                raise RuntimeError(f"the {self.name} exited:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {self.name} did not start:\n{self.tail()}")
            time.sleep(0.25)

    def kill(self) -> None:
        """SIGKILL of its process group: a crash, nothing cleaned up."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop its process group by PID: SIGTERM, then SIGKILL after `timeout` seconds
        (`dagster api grpc` may ignore SIGTERM)."""
        if self.process is not None:
            stop_process(self.process, timeout, group=True)

    def tail(self, lines: int = 40) -> str:
        """The last `lines` lines of its log."""
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
