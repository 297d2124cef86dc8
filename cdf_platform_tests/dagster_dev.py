"""`dagster dev` serving the project's workspace on a free loopback port, for UI tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DAGSTER = str(Path(sys.executable).parent / "dagster")
START_TIMEOUT_S = 180


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def dagster_dev(env: Mapping[str, str], workspace: str = "workspace.yaml") -> Iterator[str]:
    """Start `dagster dev` on `workspace` with `env` added to this process's environment, wait
    until it answers `/server_info`, yield its URL; stop its whole process group on exit."""
    port = _free_port()
    process = subprocess.Popen(
        [DAGSTER, "dev", "-w", workspace, "-h", "127.0.0.1", "-p", str(port)],
        cwd=PROJECT_ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            assert process.poll() is None, "dagster dev exited early"
            assert time.monotonic() < deadline, f"dagster dev did not answer in {START_TIMEOUT_S} s"
            try:
                with urllib.request.urlopen(f"{url}/server_info", timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        yield url
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
