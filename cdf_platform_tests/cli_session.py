"""`cdf-platform` commands run one after another in one long-lived process.

Every `cdf-platform` process that runs a pipeline starts a Spark driver (a JVM, 20-40 s here; on
a standalone cluster also an executor fetching Delta's jars from the driver): a story of three
runs would pay that three times. A `CliSession` runs the same commands through the CLI's own
entry point (`cdf_platform.cli.main`) in one process, as the commands of one shell would, so
Spark starts once; everything else is what `cdf-platform` does.

Protocol: the session process reads one JSON object per line on stdin (`args`, the command's
arguments; `env`, variables set for that command only), runs it, and writes the command's
stdout followed by `<<exit N>>` on stdout. With `start_spark`, the process starts the SparkSession
a local `cdf-platform` command would build before it reads a command (the command then reuses
it, as a second command of a session does), so a test can prepare its tables meanwhile.
`args` `["sql", statement]` runs one SQL statement on the process's SparkSession (the one the
CLI builds and its later commands reuse) and writes its rows as one JSON list: a test sets up
and reads catalog tables through the same session as the runs.
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
from typing import TYPE_CHECKING, Any

from cdf_platform_testkit.environment import environment

if TYPE_CHECKING:
    from cdf_platform.spark.runtime.session_conf import SparkSettings

# The checkout's root: the session process imports this module from it whatever its `cwd`.
ROOT = Path(__file__).resolve().parents[1]
DONE = "<<exit "
START_SPARK = "--start-spark"
SQL = "sql"


class SessionEnded(AssertionError):
    """The session process ended during a command (killed, or `os._exit` at a fault point)."""

    def __init__(self, returncode: int) -> None:
        super().__init__(f"the CLI session ended (exit {returncode})")
        self.returncode = returncode


class CliSession:
    """A long-lived process running `cdf-platform` commands with `env` added, in `cwd`
    (default: this process's working directory); stderr goes to `log`."""

    def __init__(
        self, env: dict[str, str], log: Path, cwd: Path | None = None, *, start_spark: bool = False
    ) -> None:
        self.log = log
        self._log = log.open("ab")
        command = [sys.executable, "-m", "cdf_platform_tests.cli_session"]
        self._process = subprocess.Popen(
            [*command, START_SPARK] if start_spark else command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, **env, "PYTHONPATH": python_path()},
            cwd=cwd,
        )

    def run(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        """Run `cdf-platform <args>` with `env` set for this command only: its exit code and
        stdout.

        Raises:
            SessionEnded: the process ended before the command finished.
        """
        self.send(*args, env=env)
        return self.result()

    def send(self, *args: str, env: dict[str, str] | None = None) -> None:
        """Start `cdf-platform <args>` (as `run`) without waiting for it; `result` waits."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"args": list(args), "env": env or {}}) + "\n")
        self._process.stdin.flush()

    def result(self) -> tuple[int, str]:
        """The exit code and stdout of the command `send` started.

        Raises:
            SessionEnded: the process ended before the command finished.
        """
        assert self._process.stdout is not None
        lines: list[str] = []
        for line in self._process.stdout:
            if line.startswith(DONE):
                return int(line[len(DONE) :].rstrip(">\n")), "".join(lines)
            lines.append(line)
        raise SessionEnded(self._process.wait())

    def sql(self, statement: str) -> list[list[Any]]:
        """Run `statement` on the session process's SparkSession: its rows."""
        code, output = self.run(SQL, statement)
        assert code == 0, output
        rows: list[list[Any]] = json.loads(output)
        return rows

    def stderr_tail(self, size: int = 3000) -> str:
        """The last `size` characters the process wrote to stderr (its log)."""
        self._log.flush()
        return self.log.read_text(errors="replace")[-size:]

    def __enter__(self) -> CliSession:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        assert self._process.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # the process may have ended already
            self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def python_path() -> str:
    """PYTHONPATH with the checkout's root first (the tests are not an installed package)."""
    inherited = os.environ.get("PYTHONPATH")
    return os.pathsep.join([str(ROOT), *([inherited] if inherited else [])])


def _settings() -> SparkSettings:
    """The settings a `cdf-platform run` of this environment builds its SparkSession with
    (master or Connect server, JVM log, the lake root's store connectors); the command's own
    `build_spark_session` then gets the session these started."""
    from cdf_platform.core.config import LakeEnvironment, default_spark_log
    from cdf_platform.spark.runtime.session_conf import SparkSettings

    env = LakeEnvironment.resolve()
    return SparkSettings(
        master=env.master.value,
        remote=env.remote.value if env.remote else None,
        jvm_log=default_spark_log(),
        storage_locations=(env.lake_root.value,),
    )


def _start_spark() -> None:
    from cdf_platform.spark.runtime.session import build_spark_session

    build_spark_session(_settings())


def _sql(statement: str) -> int:
    from cdf_platform.spark.runtime.session import build_spark_session

    rows = build_spark_session(_settings()).sql(statement).collect()
    sys.stdout.write(json.dumps([list(row) for row in rows], default=str) + "\n")
    return 0


def _serve(start_spark: bool) -> None:
    from cdf_platform.cli import main

    if start_spark:
        _start_spark()
    for line in sys.stdin:
        command = json.loads(line)
        captured = io.StringIO()
        with environment(command["env"]), contextlib.redirect_stdout(captured):
            args = command["args"]
            code = _sql(args[1]) if args[0] == SQL else main(args)
        sys.stdout.write(f"{captured.getvalue()}{DONE}{code}>>\n")
        sys.stdout.flush()


if __name__ == "__main__":
    _serve(START_SPARK in sys.argv[1:])
