"""`cdf-platform` on the command line: status (JVM-free, fast), run, rebuild (and its audit
record on a FAIL_FAST pipeline), bad input."""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.cli import main
from cdf_platform.core.sql import sql_path
from cdf_platform.orchestration.jobs.silver_jobs import rebuild_run_config
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.run.rebuild_policy import OVERRIDE_ACTION
from cdf_platform.spark.write.merge import TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import OWNER_PROPERTY, user_metadata
from cdf_platform_testkit.lake import orders_pipeline, write_pipelines
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_testkit.synthetic_log import write_synthetic_commits
from cdf_platform_tests.bronze import make_bronze, rows, sql
from cdf_platform_tests.cli_process import run_cli
from cdf_platform_tests.lake_platform import lake_defs, materialization


def _pipelines(tmp_path: Path, lake: Path, fallback: str = "FAIL_FAST") -> str:
    path = tmp_path / "pipelines.yaml"
    path.write_text(
        "pipelines:\n"
        "  - id: big\n"
        "    source: bronze\n"
        "    target: silver\n"
        "    keys: [id]\n"
        f"    fallback_mode: {fallback}\n"
    )
    return str(path)


def test_status_json_on_two_thousand_commits_answers_without_a_jvm(
    spark: SparkSession, lake: Path, tmp_path: Path
) -> None:
    """How fast: bench scenario (d) times `status --json` at up to 5,000 commits."""
    bronze = str(lake / "bronze")
    spark.sql(
        f"CREATE TABLE {sql_path(bronze)} (id INT) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(f"INSERT INTO {sql_path(bronze)} VALUES (1)")
    write_synthetic_commits(bronze, 2, 1999)
    # A silver table whose log holds watermark 1000 for pipeline `big`.
    silver = str(lake / "silver")
    spark.sql(
        f"CREATE TABLE {sql_path(silver)} (id INT) USING DELTA "
        f"TBLPROPERTIES ('{OWNER_PROPERTY}' = 'big')"
    )
    session = spark.newSession()
    session.conf.set(TXN_APP_ID_CONF, "big")
    session.conf.set(TXN_VERSION_CONF, "1000")
    # The platform's stamp, as its runs write it (a commit without it is a foreign write).
    session.conf.set(USER_METADATA_CONF, user_metadata(pipeline_id="big", mode="incremental"))
    session.sql(f"INSERT INTO {sql_path(silver)} VALUES (1)")

    # No Java anywhere: a JVM start would fail the command.
    no_java = {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": str(Path(sys.executable).parent)}
    args = ["status", "--json", "--pipelines", _pipelines(tmp_path, lake), "--lake-root", str(lake)]
    completed = run_cli(*args, env=no_java)

    assert completed.returncode == 0, completed.stderr
    (status,) = json.loads(completed.stdout)
    assert status["pipeline_id"] == "big"
    assert (status["watermark"], status["latest_version"], status["version_lag"]) == (
        1000,
        1999,
        999,
    )
    assert status["data_version_lag"] == 999
    assert (status["earliest_replayable_version"], status["replayable"]) == (0, True)
    assert status["state"] in ("OK", "LOW_HEADROOM")
    assert isinstance(status["headroom_hours"], float)


def test_rebuild_run_and_status_commands(spark: SparkSession, lake: Path, tmp_path: Path) -> None:
    """One command starts Spark (the rebuild); the no-op run and status never do."""
    make_bronze(spark, str(lake / "bronze"), [(1, "ada", 10), (2, "bob", 20)])
    sql(spark, str(lake / "bronze"), "UPDATE {t} SET amount = 11 WHERE id = 1")
    pipelines = _pipelines(tmp_path, lake)
    common = ["--pipelines", pipelines, "--lake-root", str(lake), "--json"]

    spark_log = tmp_path / "spark.log"
    env = {"CDF_SPARK_MASTER": "local[2]", "CDF_SPARK_LOG": str(spark_log)}
    rebuilt = run_cli("rebuild", "big", *common, env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]
    # The terminal shows the platform's progress; Ivy's report and Spark's warnings go to
    # the JVM's log file, which the progress names.
    assert f"its console output goes to {spark_log}" in rebuilt.stderr
    for noise in (":: resolving dependencies", "Ivy Default Cache", " WARN ", "log4j", "py4j"):
        assert noise not in rebuilt.stderr
    assert ":: resolving dependencies" in spark_log.read_text()
    figures = json.loads(rebuilt.stdout)
    assert (figures["mode"], figures["watermark_after"], figures["incident_code"]) == (
        "rebuild",
        2,
        "MANUAL_REBUILD",
    )
    assert rows(spark, str(lake / "silver")) == [(1, "ada", 11), (2, "bob", 20)]

    noop = run_cli("run", "big", *common)
    assert noop.returncode == 0, noop.stderr[-2000:]
    figures = json.loads(noop.stdout)
    assert (figures["mode"], figures["spark_started"], figures["watermark_after"]) == (
        "noop",
        False,
        2,
    )

    sql(spark, str(lake / "bronze"), "DELETE FROM {t} WHERE id = 2")
    table = run_cli("status", "--pipelines", pipelines, "--lake-root", str(lake))
    assert table.returncode == 0, table.stderr
    header, rule, line = table.stdout.splitlines()[:3]
    assert header.split()[:3] == ["pipeline", "state", "watermark"]
    assert set(rule.replace(" ", "")) == {"-"}
    assert line.split()[:6] == ["big", "OK", "2", "3", "1", "1"]
    # Hours as the checks and the overview write them: lag and headroom with 2 decimals.
    lag_hours, headroom_hours = line.split()[6], line.split()[8]
    assert re.fullmatch(r"\d+\.\d\d", lag_hours) and re.fullmatch(r"\d+\.\d\d", headroom_hours)


@pytest.mark.usefixtures("shuffle_partitions_kept")
def test_a_fail_fast_rebuild_at_a_shell_writes_the_audit_record_of_the_rebuild_jobs_override(
    spark: SparkSession,
    spark_resource: SparkResource,
    lake: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A person at a shell needs no permission to rebuild a FAIL_FAST pipeline, and the rebuild
    is audited as the rebuild job's `override_fail_fast` is: the same maintenance-log row,
    field by field, but for who asked (run, job, tags) and what let it run. (The command runs
    in this process, on its session: `test_rebuild_run_and_status_commands` runs it in one of
    its own.)"""
    strict = orders_pipeline("strict", fallback_mode="FAIL_FAST")
    write_orders_batch(str(lake / "bronze" / "strict"), batch_size=20)
    pipelines = str(write_pipelines(lake / "pipelines.yaml", [strict]))

    capsys.readouterr()
    code = main(["rebuild", "strict", "--pipelines", pipelines, "--lake-root", str(lake), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    figures = json.loads(out)
    assert (figures["mode"], figures["incident_code"]) == ("rebuild", "MANUAL_REBUILD")

    # The rebuild job's override, permitted by the deployment, on the same silver and bronze.
    defs = lake_defs(spark_resource, lake, strict, allow_destructive=True)
    by_job_run = defs.resolve_job_def("rebuild_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(),
        run_config=rebuild_run_config("strict", override_fail_fast=True),
        asset_selection=[silver_key("strict")],
        tags={"dagster/user": "operator@example.com"},
    )
    outcome = materialization(by_job_run, silver_key("strict"))
    assert (outcome["mode"], outcome["override_fail_fast"]) == ("rebuild", True)

    log = ControlTable(str(lake / "_control")).read_maintenance_log()
    at_shell, by_job = [row for row in log if row["action"] == OVERRIDE_ACTION]
    same = (
        "table_location",
        "action",
        "outcome",
        "destructive",
        "reason",
        "destroyed",
        "windows_cut",
        "files_deleted",
        "latest_version",
    )
    assert {name: at_shell[name] for name in same} == {name: by_job[name] for name in same}
    assert at_shell["table_location"].rstrip("/").endswith("silver/strict")
    assert (at_shell["outcome"], at_shell["destructive"]) == ("started", True)
    assert at_shell["reason"] == (
        "rebuild of FAIL_FAST pipeline strict with override_fail_fast; incident: none found by "
        "the plan"
    )
    assert at_shell["latest_version"] == figures["end_version"]
    assert at_shell["destroyed"] == (
        f"silver's rows are replaced by bronze's snapshot at version {figures['end_version']} "
        "without the FAIL_FAST review"
    )
    # Who asked, and what let it run: each entry's own. The shell's run is its load-log row's.
    assert (at_shell["run_id"], at_shell["job"], at_shell["tags"]) == (
        figures["run_id"],
        "cdf-platform rebuild",
        "{}",
    )
    assert at_shell["permitted_by"] == "cdf-platform at a shell"
    assert (by_job["run_id"], by_job["job"], by_job["permitted_by"]) == (
        by_job_run.run_id,
        "rebuild_job",
        "CDF_ALLOW_DESTRUCTIVE=1",
    )
    assert json.loads(by_job["tags"])["dagster/user"] == "operator@example.com"


def test_unknown_pipeline_and_bad_file_exit_2_with_the_fix_named(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    unknown = run_cli(
        "run", "nope", "--pipelines", _pipelines(tmp_path, lake), "--lake-root", str(lake)
    )
    assert unknown.returncode == 2
    assert "no pipeline 'nope'; known: ['big']" in unknown.stderr
    assert "What to do" in unknown.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("pipelines:\n  - id: Bad-Id\n    source: a\n    target: b\n    keys: []\n")
    invalid = run_cli("status", "--pipelines", str(bad))
    assert invalid.returncode == 2
    assert "InvalidPipelineSpec" in invalid.stderr
    assert "pipeline Bad-Id: id:" in invalid.stderr
    assert "keys:" in invalid.stderr


def test_py4j_connection_chatter_stays_off_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """py4j logs every connection to the JVM it closes at INFO ("Closing down clientserver
    connection", a dozen lines in the demo's output); the command line keeps it at WARNING
    while its own progress stays at INFO."""
    monkeypatch.setattr(logging.getLogger(), "level", logging.INFO)
    monkeypatch.setattr(logging.getLogger("py4j"), "level", logging.NOTSET)
    assert main(["status", "--pipelines", str(tmp_path / "missing.yaml")]) == 2
    assert not logging.getLogger("py4j.clientserver").isEnabledFor(logging.INFO)
    assert logging.getLogger("cdf_platform").isEnabledFor(logging.INFO)
