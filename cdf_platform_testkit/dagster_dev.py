"""`dagster dev` serving the project's workspace on a free loopback port, for UI tests."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from cdf_platform.services.service import LoopbackServer

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DAGSTER = str(Path(sys.executable).parent / "dagster")
START_TIMEOUT_S = 180


class DagsterDev(LoopbackServer):
    """`dagster dev` on `workspace` (in the project folder) with `env` added to this process's
    environment; ready once it answers `/server_info`. Its output is discarded."""

    name = "dagster dev"
    start_timeout = START_TIMEOUT_S
    stop_timeout = 60.0
    poll_seconds = 1.0

    def __init__(self, env: Mapping[str, str], workspace: str) -> None:
        super().__init__(None, cwd=PROJECT_ROOT)
        self.env, self.workspace = dict(env), workspace

    def command(self) -> list[str]:
        return [DAGSTER, "dev", "-w", self.workspace, "-h", "127.0.0.1", "-p", str(self.port)]

    def process_env(self) -> Mapping[str, str]:
        return self.env

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint}/server_info", timeout=5) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False


@contextmanager
def dagster_dev(env: Mapping[str, str], workspace: str = "workspace.yaml") -> Iterator[str]:
    """Start `dagster dev` on `workspace` with `env` added to this process's environment, wait
    until it answers `/server_info`, yield its URL; stop its whole process group on exit."""
    with DagsterDev(env, workspace) as server:
        yield server.endpoint
