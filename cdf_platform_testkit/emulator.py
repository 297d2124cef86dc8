"""A storage emulator (Azurite, fake-gcs-server) as a `LoopbackServer`: on a free loopback
port, in a process group of its own, ready once it answers HTTP, stopped by its PID."""

from __future__ import annotations

from pathlib import Path

from cdf_platform.services.service import LoopbackServer


class EmulatorProcess(LoopbackServer):
    """A storage emulator on a free loopback port, its log `<name>.log` in `workdir` (also its
    working directory); ready once it answers HTTP, then `prepare` creates what the tests write
    to (a container, a bucket).

    Args:
        workdir: Its working directory and its log file's folder.
    """

    start_timeout = 30.0
    stop_timeout = 10.0
    poll_seconds = 0.1

    def __init__(self, workdir: Path) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.workdir = workdir
        self.log_path = workdir / f"{self.name}.log"
        super().__init__(self.log_path, cwd=workdir)
