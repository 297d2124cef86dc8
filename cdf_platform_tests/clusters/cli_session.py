"""`cdf-platform` commands run one after another in one long-lived process.

On a standalone cluster every `cdf-platform` process starts a driver and has the master start an
executor for it (each a JVM, the executor fetching Delta's jars from the driver): a story of
three runs would pay that three times. A `CliSession` runs the same commands through the CLI's
own entry point (`cdf_platform.cli.main`) in one process, as the commands of one shell would,
so the cluster application starts once; everything else is what `cdf-platform` does.

Protocol: the session process reads one JSON list of arguments per line on stdin, runs it, and
writes the command's stdout followed by `<<exit N>>` on stdout. `["sql", statement]` runs one
SQL statement on the process's SparkSession (the one the CLI builds and its later commands
reuse) and writes its rows as one JSON list: a test sets up and reads catalog tables through
the same session as the runs.
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
from typing import Any

DONE = "<<exit "
SQL = "sql"


class CliSession:
    """A long-lived process running `cdf-platform` commands with `env` added."""

    def __init__(self, env: dict[str, str], log: Path, cwd: Path | None = None) -> None:
        self._log = log.open("ab")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "cdf_platform_tests.clusters.cli_session"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, **env},
            cwd=cwd,
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

    def sql(self, statement: str) -> list[list[Any]]:
        """Run `statement` on the session process's SparkSession: its rows."""
        code, output = self.run(SQL, statement)
        assert code == 0, output
        rows: list[list[Any]] = json.loads(output)
        return rows

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


def _sql(statement: str) -> int:
    from cdf_platform.core.config import default_master, default_remote, default_spark_log
    from cdf_platform.spark.session import SparkSettings, build_spark_session

    settings = SparkSettings(
        master=default_master(), remote=default_remote(), jvm_log=default_spark_log()
    )
    rows = build_spark_session(settings).sql(statement).collect()
    sys.stdout.write(json.dumps([list(row) for row in rows], default=str) + "\n")
    return 0


def _serve() -> None:
    from cdf_platform.cli import main

    for line in sys.stdin:
        args = json.loads(line)
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            code = _sql(args[1]) if args[0] == SQL else main(args)
        sys.stdout.write(f"{captured.getvalue()}{DONE}{code}>>\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve()
