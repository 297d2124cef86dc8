"""A real S3-compatible server on 127.0.0.1 for the demo's S3 lake and the object-store tests.

It is moto's S3 backend (the `moto[server]` package of the dev extras), the same application
`moto_server` serves, on `granian`'s HTTP server instead of `moto_server`'s: real HTTP on a free
loopback port, with the conditional PUT (`If-None-Match`) that `deltalake`'s commits rely on.
Started as a child process (its own process group: granian runs a worker process), waited for,
and stopped by its PID (a `LoopbackServer`).

Why not `moto_server` itself: it serves through Werkzeug's development server, which closes
the connection after every response (a new TCP connection and a new thread per request), and
through moto's dispatcher over every AWS service, which lists moto's package folder and stats
its ~180 entries under a global lock on every request. The test stand-in, not the platform,
then set the time of every cold read of a long log: on the 2-core machine a cold `status` of a
2,000-commit log takes more than twice as long against `moto_server` as against this server,
with the same requests (bench/object_store.py measures both; docs/storage.md has the figures). Real
S3 keeps connections alive too.

Example:
    >>> with LocalS3Server() as server:  # doctest: +SKIP
    ...     lake = Lake.load(
    ...         lake_root=f"s3://{server.bucket}/lake", storage=server.storage_config()
    ...     )
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Self

from cdf_platform.core.errors import RuntimeEnvironmentError
from cdf_platform.core.storage import StorageConfig
from cdf_platform.services.service import LoopbackServer

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0
# moto accepts any key pair; these are not secrets.
# moto's switch for the CORS headers it adds to every response.
CORS_ENV = "MOTO_DISABLE_GLOBAL_CORS"
DUMMY_KEY_ID = "cdf-platform-local"
DUMMY_SECRET = "cdf-platform-local-secret"
# The access-log line `create_app` writes per request: `"GET /bucket/key HTTP/1.1" 200`.
_REQUEST_LINE = re.compile(r'"(?:GET|PUT|HEAD|POST|DELETE) /')


def _require(module: str) -> None:
    """Raise when the dev extra that provides `module` is not installed."""
    if importlib.util.find_spec(module) is None:
        raise RuntimeEnvironmentError(
            f"{module} is not installed (the local S3 server needs it)",
            action='install the dev extras (`make setup`, or pip install -e ".[dev]")',
        )


# A WSGI application: (environ, start_response) -> body chunks.
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def create_app() -> WsgiApp:
    """moto's S3 application, writing one access-log line per request to stdout.

    The line (`"GET /bucket/key HTTP/1.1" 200`) is written and flushed when the response
    starts, before the client can see it, so `LocalS3Server.request_count` is exact the moment
    a request returns. granian calls this factory in its worker process.
    """
    from moto.moto_server.werkzeug_app import create_backend_app

    s3 = create_backend_app("s3")
    # moto turns Flask's debug mode on (it re-raises errors); an error here is a 500 response.
    s3.debug = False
    lock = threading.Lock()

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def logged_start(status: str, headers: list[tuple[str, str]], *info: Any) -> Any:
            line = (
                f'{environ.get("REMOTE_ADDR", "-")} - "{environ["REQUEST_METHOD"]} '
                f'{environ.get("PATH_INFO", "/")} {environ.get("SERVER_PROTOCOL", "HTTP/1.1")}" '
                f"{status.split(' ', 1)[0]}\n"
            )
            with lock:
                sys.stdout.write(line)
                sys.stdout.flush()
            return start_response(status, headers, *info)

        return s3(environ, logged_start)

    return app


def server_command(port: int) -> list[str]:
    """The command that serves `create_app` on 127.0.0.1:`port`.

    One worker process with one application thread: moto's backend holds its objects in that
    process, and its Python code gains nothing from more threads (the GIL), while granian's
    Rust side keeps many client connections alive and parses their requests.

    Raises:
        RuntimeEnvironmentError: moto or granian is not installed.
    """
    _require("moto")
    _require("granian")
    return [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "wsgi",
        "--factory",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--blocking-threads",
        "1",
        "--http",
        "1",
        "--no-ws",
        "--log-level",
        "warning",
        f"{__name__}:create_app",
    ]


class LocalS3Server(LoopbackServer):
    """moto's S3 application on a free loopback port, with one bucket.

    Args:
        bucket: The bucket created once the server answers.
    """

    name = "local S3 server"
    start_timeout = START_TIMEOUT_SECONDS
    stop_timeout = STOP_TIMEOUT_SECONDS
    poll_seconds = 0.1
    # What one request's line in the server's log looks like (see `command`).
    request_line = _REQUEST_LINE

    def __init__(self, bucket: str = "lake") -> None:
        with tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False) as log:
            self.log_path = Path(log.name)
        super().__init__(self.log_path)
        self.bucket = bucket

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

    def storage_config(self) -> StorageConfig:
        """The options that point deltalake, obstore and Spark's S3A at this server for the
        bucket: what a lake on it is loaded with (`Lake.load(storage=...)`)."""
        options = {
            "endpoint": self.endpoint,
            "allow_http": True,
            "access_key_id": DUMMY_KEY_ID,
            "secret_access_key": DUMMY_SECRET,
            "region": "us-east-1",
        }
        return StorageConfig.parse({f"s3://{self.bucket}": options}, origin="the local S3 server")

    def command(self) -> list[str]:
        """The server's command line (`server_command` on this server's port)."""
        return server_command(self.port)

    def process_env(self) -> Mapping[str, str | None]:
        """No browser talks to this server: moto skips the CORS headers it adds to every
        response (it reads the variable when it loads), unless this process's environment
        says otherwise."""
        return {CORS_ENV: os.environ.get(CORS_ENV, "true")}

    def start(self) -> Self:
        """Start the server, wait until it answers, create the bucket.

        Raises:
            RuntimeEnvironmentError: it is not installed, exited, or did not answer in time.
        """
        try:
            return super().start()
        except RuntimeError as error:
            raise RuntimeEnvironmentError(
                f"the local S3 server did not start on {self.port}: {error}"
            ) from error

    def prepare(self) -> None:
        """Create the bucket."""
        request = urllib.request.Request(f"{self.endpoint}/{self.bucket}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass

    def request_count(self) -> int:
        """Requests the server has answered so far (one line each in its log)."""
        text = self.log_path.read_text(errors="replace")
        return len(self.request_line.findall(text))

    def stop(self) -> None:
        """Stop the server by its PID (terminate, then kill) and remove its log."""
        super().stop()
        self.log_path.unlink(missing_ok=True)
