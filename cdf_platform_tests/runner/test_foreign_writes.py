"""Writes to silver the platform did not make (UPDATE, DELETE, INSERT by Spark SQL and by
`deltalake`) are named by `status` and the `foreign_writes` check, read in a process that has
no Java; the platform's own runs, rebuilds, new columns, OPTIMIZE and VACUUM never are, and a
verification that found silver equal settles the writes before it."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

import cdf_platform
from cdf_platform.core.sql import quote_ident
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.run import PipelineRunner
from cdf_platform.state.verifications import (
    Verification,
    VerificationOutcome,
    record_verification,
)
from cdf_platform_tests.bronze import deltalake_bronze, deltalake_insert, sql
from cdf_platform_tests.cli_process import python_json
from cdf_platform_tests.lake_platform import control_for


def _spark_insert(spark: SparkSession, path: str) -> None:
    """INSERT INTO silver (Spark SQL) a copy of row 1 as key 7, platform columns and all."""
    columns = spark.read.format("delta").load(path).columns
    values = ", ".join("7" if c == "id" else quote_ident(c) for c in columns)
    sql(spark, path, f"INSERT INTO {{t}} SELECT {values} FROM {{t}} WHERE id = 1")


def _deltalake_append(_spark: SparkSession, path: str) -> None:
    """`write_deltalake(mode="append")` of a copy of row 1 as key 7."""
    row = DeltaTable(path).to_pyarrow_table(filters=[("id", "=", 1)])
    row = row.set_column(row.schema.get_field_index("id"), "id", pa.array([7], pa.int64()))
    write_deltalake(path, row, mode="append")


# pipeline -> (the foreign write, the operation silver's log names it by)
FOREIGN: dict[str, tuple[Any, str]] = {
    "spark_update": (lambda s, p: sql(s, p, "UPDATE {t} SET amount = 99 WHERE id = 1"), "UPDATE"),
    "spark_delete": (lambda s, p: sql(s, p, "DELETE FROM {t} WHERE id = 2"), "DELETE"),
    "spark_insert": (_spark_insert, "WRITE"),
    "deltalake_update": (
        lambda _s, p: DeltaTable(p).update(predicate="id = 1", updates={"amount": "99"}),
        "UPDATE",
    ),
    "deltalake_delete": (lambda _s, p: DeltaTable(p).delete("id = 2"), "DELETE"),
    "deltalake_append": (_deltalake_append, "WRITE"),
}
FAIL_FAST = "deltalake_delete"
PIPELINES = [*FOREIGN, "maintained", "rebuilt", "verified"]

# Status (the CLI's JSON and table) and the checks job, in a fresh interpreter that has no Java:
# a JVM start would fail it, and it says whether a SparkSession exists at its end.
_EVALUATE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    import dagster as dg
    from pyspark.sql import SparkSession
    from cdf_platform.cli import main
    from cdf_platform.definitions import build_defs
    from cdf_platform.orchestration.shared.resources import LakeLayout

    lake, pipelines = sys.argv[1], sys.argv[2]
    common = ["--pipelines", pipelines, "--lake-root", lake]
    with contextlib.redirect_stdout(io.StringIO()) as as_json:
        exit_code = main(["status", "--json", *common])
    with contextlib.redirect_stdout(io.StringIO()) as as_table:
        main(["status", *common])
    defs = build_defs(LakeLayout(lake_root=lake, pipelines_file=pipelines))
    result = defs.resolve_job_def("checks_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False
    )
    checks = {
        e.asset_key.path[-1]: {
            "passed": e.passed,
            "severity": e.severity.value,
            "metadata": {k: v.value for k, v in e.metadata.items()},
            "plotted": [k for k, v in e.metadata.items() if isinstance(v, dg.IntMetadataValue)],
        }
        for e in result.get_asset_check_evaluations()
        if e.check_name == "foreign_writes"
    }
    print(json.dumps({
        "exit": exit_code,
        "status": {s["pipeline_id"]: s for s in json.loads(as_json.getvalue())},
        "table": as_table.getvalue(),
        "checks": checks,
        "spark_session": SparkSession.getActiveSession() is not None,
    }))
    """
)


def _entry(pipeline: str) -> dict[str, Any]:
    return {
        "id": pipeline,
        "source": f"bronze/{pipeline}",
        "target": f"silver/{pipeline}",
        "keys": ["id"],
        "fallback_mode": "FAIL_FAST" if pipeline == FAIL_FAST else "SNAPSHOT_REBUILD",
        # `deltalake` 1.6 neither reads nor writes a table with deletion vectors.
        "deletion_vectors": False,
    }


def _vacuum_logged(spark: SparkSession, path: str) -> None:
    """VACUUM with its START/END commits in the log, past the retention check (own session)."""
    session = spark.newSession()
    session.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    session.conf.set("spark.databricks.delta.vacuum.logging.enabled", "true")
    session.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS")


def _platform_only(spark: SparkSession, runner: PipelineRunner, layout: LakeLayout) -> None:
    """`maintained`: runs, a new column (ALTER TABLE on silver), OPTIMIZE and VACUUM by Spark
    and by `deltalake`, a property change: many commits, none a foreign write."""
    spec = layout.spec("maintained")
    deltalake_insert(spec.source, [(3, "cy", 30)])
    runner.run(spec)
    sql(spark, spec.source, "ALTER TABLE {t} ADD COLUMNS (note STRING)")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (4, 'dee', 40, 'new')")
    runner.run(spec)
    sql(spark, spec.target, "OPTIMIZE {t}")
    _vacuum_logged(spark, spec.target)
    silver = DeltaTable(spec.target)
    silver.optimize.compact()
    silver.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    silver.alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})


@pytest.fixture(scope="module")
def evaluated(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every pipeline loaded, its silver written to as its name says, then evaluated."""
    lake = tmp_path_factory.mktemp("foreign") / "lake"
    lake.mkdir()
    layout = control_for(lake, *(_entry(p) for p in PIPELINES))
    control = layout.control()
    runner = PipelineRunner.on(control, lambda: spark)
    # Bronze is written by deltalake: only silver's log is looked at.
    for pipeline in PIPELINES:
        spec = layout.spec(pipeline)
        deltalake_bronze(spec.source, [(1, "ada", 10), (2, "bob", 20)])
        runner.run(spec)
    for pipeline, (write, _operation) in FOREIGN.items():
        spec = layout.spec(pipeline)
        write(spark, spec.target)
        deltalake_insert(spec.source, [(5, "eve", 50)])
        runner.run(spec)  # a platform run after the foreign write is no foreign write
    _platform_only(spark, runner, layout)
    rebuilt = layout.spec("rebuilt")
    sql(spark, rebuilt.target, "UPDATE {t} SET amount = 99 WHERE id = 1")
    runner.run(rebuilt, force_rebuild=True)  # reconciles silver: the update is superseded
    verified = layout.spec("verified")
    sql(spark, verified.target, "UPDATE {t} SET amount = 99 WHERE id = 1")
    equal_at = int(DeltaTable(verified.target).version())
    record_verification(
        control,
        Verification("verified", "v1", 1, equal_at, outcome=VerificationOutcome.EQUAL),
    )
    sql(spark, verified.target, "DELETE FROM {t} WHERE id = 2")
    repository = str(Path(cdf_platform.__file__).parents[1])
    no_java = {
        "PATH": str(Path(sys.executable).parent),
        "HOME": os.environ.get("HOME", str(lake)),
        "JAVA_HOME": str(lake / "no-java"),
        "PYTHONPATH": repository,
        "DAGSTER_HOME": str(lake),
    }
    result = python_json(_EVALUATE, str(lake), str(layout.pipelines_file), env=no_java)
    result["equal_at"] = equal_at
    return result


@pytest.mark.parametrize("pipeline", list(FOREIGN))
def test_a_foreign_write_is_named_by_status_and_the_check(
    evaluated: dict[str, Any], pipeline: str
) -> None:
    operation = FOREIGN[pipeline][1]
    status = evaluated["status"][pipeline]
    ((write),) = status["foreign_writes"]
    assert write["operation"] == operation
    assert status["foreign_writes_baseline"] == "rebuild v1"  # the initial load
    label = f"v{write['version']} {operation}"
    assert f"{pipeline}: foreign writes: {label} (since rebuild v1)" in evaluated["table"]
    check = evaluated["checks"][pipeline]
    severity = "ERROR" if pipeline == FAIL_FAST else "WARN"
    assert (check["passed"], check["severity"]) == (False, severity)
    assert check["metadata"]["foreign_writes"] == label
    assert check["metadata"]["foreign_write_count"] == 1
    assert check["plotted"] == ["foreign_write_count"]
    assert evaluated["exit"] == 1


def test_the_search_starts_no_spark(evaluated: dict[str, Any]) -> None:
    assert evaluated["spark_session"] is False


@pytest.mark.parametrize("pipeline", ["maintained", "rebuilt"])
def test_platform_runs_rebuilds_optimize_and_vacuum_are_not_foreign_writes(
    evaluated: dict[str, Any], pipeline: str
) -> None:
    status = evaluated["status"][pipeline]
    assert status["foreign_writes"] == []
    assert f"{pipeline}: foreign writes" not in evaluated["table"]
    check = evaluated["checks"][pipeline]
    assert (check["passed"], check["metadata"]["foreign_write_count"]) == (True, 0)
    if pipeline == "rebuilt":
        assert status["foreign_writes_baseline"].startswith("rebuild v")
        assert status["foreign_writes_baseline"] != "rebuild v1"


def test_a_verification_that_found_silver_equal_settles_the_writes_before_it(
    evaluated: dict[str, Any],
) -> None:
    status = evaluated["status"]["verified"]
    ((write),) = status["foreign_writes"]
    assert (write["version"], write["operation"]) == (evaluated["equal_at"] + 1, "DELETE")
    assert status["foreign_writes_baseline"] == f"verified v{evaluated['equal_at']}"
    assert evaluated["checks"]["verified"]["metadata"]["foreign_write_count"] == 1
