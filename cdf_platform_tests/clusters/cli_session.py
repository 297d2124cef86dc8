"""`cdf-platform` commands run one after another in one long-lived process.

On a standalone cluster every `cdf-platform` process starts a driver and has the master start an
executor for it (each a JVM, the executor fetching Delta's jars from the driver): a story of
three runs would pay that three times. A `CliSession` runs the same commands through the CLI's
own entry point (`cdf_platform.cli.main`) in one process, as the commands of one shell would,
so the cluster application starts once; everything else is what `cdf-platform` does.

Protocol: the session process reads one JSON list of arguments per line on stdin, runs it, and
writes the command's stdout followed by `<<exit N>>` on stdout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from types import TracebackType

DONE = "<<exit "


class CliSession:
    """A long-lived process running `cdf-platform` commands with `env` added."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self._log = log.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "cdf_platform_tests.clusters.cli_session"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, **env},
        )

    def run(self, *args: str) -> tuple[int, str]:
        """Run `cdf-platform <args>`: its exit code and stdout."""
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(list(args)) + "\n")
        self._process.stdin.flush()
        lines = []
        for line in self._process.stdout:
            if line.startswith(DONE):
                return int(line[len(DONE) :].rstrip(">\n")), "".join(lines)
            lines.append(line)
        raise AssertionError(f"the CLI session ended (exit {self._process.wait()})")

    def __enter__(self) -> CliSession:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def _serve() -> None:
    from cdf_platform.cli import main

    for line in sys.stdin:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            code = main(json.loads(line))
        sys.stdout.write(f"{captured.getvalue()}{DONE}{code}>>\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
