"""Local server processes, each in its own process group: started with a log file, waited for,
and stopped by PID. The demo's deployment (`cdf_platform.demo.deployment`), the local S3 server
(`cdf_platform.services.local_s3`) and every server of the test kit (`cdf_platform_testkit`)
use them: `Service` is one process,
`LoopbackServer` one server on a free port of 127.0.0.1, `wait_for` the one poll.

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
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

START_TIMEOUT_SECONDS = 180.0
T = TypeVar("T")


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


def wait_for(
    what: str,
    probe: Callable[[], T | None],
    timeout: float,
    every: float = 1.0,
    *,
    error: type[Exception] = TimeoutError,
) -> T:
    """`probe()`'s first truthy value, polled every `every` seconds for `timeout` seconds.

    Raises:
        TimeoutError: `probe()` gave none within `timeout` (the message names `what`); `error`
            instead when given.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise error(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


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


class ServiceExited(RuntimeError):
    """A service's process exited while it was waited for (its exit code in `returncode`)."""

    def __init__(self, message: str, returncode: int | None) -> None:
        super().__init__(message)
        self.returncode = returncode


@dataclass
class Service:
    """One long-running process (its own process group), its output in `log` (discarded when
    None); `popen_options` are further `subprocess.Popen` arguments (a user to run as, say)."""

    name: str
    command: list[str]
    log: Path | None
    cwd: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    popen_options: dict[str, Any] = field(default_factory=dict)

    def start(self, env: Mapping[str, str | None]) -> None:
        """Start it with this process's environment updated by `env` (a None value: the
        variable is removed)."""
        merged = {**os.environ, **env}
        with contextlib.ExitStack() as stack:
            if self.log is None:
                output: Any = subprocess.DEVNULL
            else:
                self.log.parent.mkdir(parents=True, exist_ok=True)
                output = stack.enter_context(self.log.open("ab"))
            self.process = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env={name: value for name, value in merged.items() if value is not None},
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                **self.popen_options,
            )

    @property
    def pid(self) -> int:
        if self.process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_until(
        self, ready: Callable[[], bool], timeout: float = START_TIMEOUT_SECONDS, every: float = 0.25
    ) -> None:
        """Wait until `ready()` (asked every `every` seconds); raise RuntimeError (with the
        log's tail) when the process exits first or `timeout` seconds pass."""
        deadline = time.monotonic() + timeout
        while not ready():
            if not self.alive():
                code = self.process.returncode if self.process is not None else None
                raise ServiceExited(f"the {self.name} exited ({code}):\n{self.tail()}", code)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the {self.name} did not start:\n{self.tail()}")
            time.sleep(every)

    def signal(self, number: int) -> None:
        """Send signal `number` to its process group (nothing once it has gone)."""
        if self.process is not None:
            _signal(os.killpg, self.process.pid, number)

    def kill(self) -> None:
        """SIGKILL of its process group: a crash, nothing cleaned up."""
        self.signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(timeout=30)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop its process group by PID: SIGTERM, then SIGKILL after `timeout` seconds
        (`dagster api grpc` may ignore SIGTERM)."""
        if self.process is not None:
            stop_process(self.process, timeout, group=True)

    def tail(self, lines: int = 40) -> str:
        """The last `lines` lines of its log."""
        if self.log is None or not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class LoopbackServer:
    """A server on a free port of 127.0.0.1, run as a `Service`: started, waited for until
    `ready()`, prepared (`prepare()`), and stopped by PID. A subclass gives `name`,
    `command()`, and `ready()` unless an HTTP answer at `endpoint` means ready; the port is
    chosen once, so a restart serves the same address.

    Args:
        log: The server's log file (None: its output is discarded).
        cwd: Its working directory (default: this process's).

    Example:
        >>> class Echo(LoopbackServer):
        ...     name = "echo server"
        ...     def command(self) -> list[str]:
        ...         return ["python", "-m", "http.server", "-b", "127.0.0.1", str(self.port)]
        >>> with Echo(Path("/tmp/echo.log")) as echo:  # doctest: +SKIP
        ...     urllib.request.urlopen(echo.endpoint)
    """

    name = "server"
    start_timeout: float = START_TIMEOUT_SECONDS
    stop_timeout: float = 20.0
    poll_seconds: float = 0.25

    def __init__(self, log: Path | None, *, cwd: Path | None = None) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.service = Service(self.name, [], log, cwd=cwd)

    def command(self) -> list[str]:
        """The server's command line, listening on `self.port` of 127.0.0.1."""
        raise NotImplementedError

    def process_env(self) -> Mapping[str, str | None]:
        """What the server's process gets beyond this process's environment (None: removed)."""
        return {}

    def ready(self) -> bool:
        """Whether the server is ready: by default, whether it answers HTTP at `endpoint`."""
        return answers_http(self.endpoint)

    def prepare(self) -> None:
        """What to do once it is ready (create a bucket, say)."""

    @property
    def pid(self) -> int | None:
        """The server's PID (it leads its process group); None when stopped."""
        return self.service.pid if self.service.process is not None else None

    def alive(self) -> bool:
        return self.service.alive()

    def start(self) -> Self:
        """Start the server, wait until it is ready, prepare it.

        Raises:
            RuntimeError: it exited, or was not ready within `start_timeout` seconds (it is
                stopped first; the message holds its log's tail).
        """
        self.service.command = self.command()
        self.service.start(self.process_env())
        try:
            self.service.wait_until(self.ready, self.start_timeout, self.poll_seconds)
        except RuntimeError:
            self.stop()
            raise
        self.prepare()
        return self

    def stop(self) -> None:
        """Stop the server by its PID (its process group: SIGTERM, then SIGKILL after
        `stop_timeout` seconds)."""
        process, self.service.process = self.service.process, None
        if process is not None:
            stop_process(process, self.stop_timeout, group=True)

    def kill(self) -> None:
        """SIGKILL of the server's process group (a crash)."""
        self.service.kill()
        self.service.process = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
