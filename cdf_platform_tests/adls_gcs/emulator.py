"""A storage emulator as a child process: started on a free loopback port in a session of its
own, waited for until it answers HTTP, and stopped by its PID (the local S3 server's
`stop_process`)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from cdf_platform.demo.services import answers_http, free_port, stop_process

START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 10.0


class EmulatorProcess:
    """One emulator process on `127.0.0.1:<port>`; subclasses give its `name` (for messages
    and the log file), its command and what to do once it answers (`_prepare`).

    Args:
        workdir: Its working directory and its log file's folder.
    """

    name = "emulator"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / f"{self.name}.log"
        self._process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        """The emulator's command line, listening on `self.port` of 127.0.0.1 only."""
        raise NotImplementedError

    def _prepare(self) -> None:
        """Create what the tests write to (a container, a bucket) once the emulator answers."""

    @property
    def pid(self) -> int | None:
        """The emulator's PID; None when stopped."""
        return self._process.pid if self._process is not None else None

    def start(self) -> Self:
        """Start the emulator, wait until it answers, prepare it.

        Raises:
            RuntimeError: it exited, or did not answer within START_TIMEOUT_SECONDS.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,  # stopped with whatever it starts, by process group
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not answers_http(self.endpoint):
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = self.log_path.read_text(errors="replace")[-2000:]
                self.stop()
                raise RuntimeError(f"{self.name} did not start on port {self.port}: {tail}")
            time.sleep(0.1)
        self._prepare()
        return self

    def stop(self) -> None:
        """Stop the emulator by its PID (terminate, then kill); its log stays in `workdir`."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, STOP_TIMEOUT_SECONDS, group=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
