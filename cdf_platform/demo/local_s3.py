"""A real S3-compatible server on 127.0.0.1 for the demo's S3 lake and the object-store tests.

It is moto's server mode (`moto_server`, from the `moto[server]` package of the dev extras):
real HTTP on a free loopback port, with the conditional PUT (`If-None-Match`) that `deltalake`'s
commits rely on. Started as a child process, waited for, and stopped by its PID.

Example:
    >>> with LocalS3Server() as server:  # doctest: +SKIP
    ...     os.environ.update(server.env())
    ...     lake = f"s3://{server.bucket}/lake"
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from cdf_platform.core.errors import RuntimeEnvironmentError

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
# moto accepts any key pair; these are not secrets.
DUMMY_KEY_ID = "cdf-platform-local"
DUMMY_SECRET = "cdf-platform-local-secret"
# The access-log line the server writes per request: `"GET /bucket/key HTTP/1.1" 200 -`.
_REQUEST_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)?(?:GET|PUT|HEAD|POST|DELETE) /')


def stop_process(process: subprocess.Popen[Any], timeout: float, *, group: bool = False) -> None:
    """Stop `process` by its PID (its whole process group with `group`): SIGTERM, then SIGKILL
    if it has not exited within `timeout` seconds. A process that has exited is left alone."""
    if process.poll() is not None:
        return
    send = os.killpg if group else os.kill
    send(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        send(process.pid, signal.SIGKILL)
        process.wait()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def moto_server_command() -> str:
    """The `moto_server` executable beside this interpreter (or on PATH).

    Raises:
        RuntimeEnvironmentError: moto's server mode is not installed.
    """
    beside = Path(sys.executable).parent / "moto_server"
    found = str(beside) if beside.exists() else shutil.which("moto_server")
    if found is None:
        raise RuntimeEnvironmentError(
            "moto_server not found",
            action='install the dev extras (`make setup`, or pip install -e ".[dev]")',
        )
    return found


class LocalS3Server:
    """moto's S3 server on a free loopback port, with one bucket.

    Args:
        bucket: The bucket created once the server answers.
    """

    def __init__(self, bucket: str = "lake") -> None:
        self.bucket = bucket
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (lives as long as the server)
            prefix="moto-", suffix=".log", delete=False
        )
        self.log_path = Path(self._log.name)
        self._process: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        """The variables that point deltalake, obstore and Spark's S3A at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": DUMMY_KEY_ID,
            "AWS_SECRET_ACCESS_KEY": DUMMY_SECRET,
            "AWS_REGION": "us-east-1",
            # Spark binds to a non-loopback address otherwise.
            "SPARK_LOCAL_IP": "127.0.0.1",
        }

    def start(self) -> LocalS3Server:
        """Start the server, wait until it answers, create the bucket.

        Raises:
            RuntimeEnvironmentError: it is not installed, exited, or did not answer in time.
        """
        command = [moto_server_command(), "-H", "127.0.0.1", "-p", str(self.port)]
        self._process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeEnvironmentError(f"moto_server did not start on {self.port}: {tail}")
            time.sleep(0.1)
        request = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/", timeout=1):
                return True
        except urllib.error.HTTPError:
            return True  # it answered, even if not with 200
        except OSError:
            return False

    def request_count(self) -> int:
        """Requests the server has answered so far (one line each in its log)."""
        text = self.log_path.read_text(errors="replace")
        return len(_REQUEST_LINE.findall(text))

    def stop(self) -> None:
        """Stop the server by its PID (terminate, then kill) and remove its log."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, STOP_TIMEOUT_SECONDS)
        self._log.close()
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> LocalS3Server:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
