"""Bronze commits that change no row (OPTIMIZE, a property change, VACUUM START/END) advance the
watermark without Spark, in a silver commit of no data that later Spark writes build on; a
schema change, or a silver protocol `deltalake` cannot write, still goes through Spark."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdf_platform.core.sql import sql_path
from cdf_platform.planning.plan import RunMode, plan_pipeline
from cdf_platform.planning.status import pipeline_status
from cdf_platform.run import PipelineRunner
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.bronze import control_for, insert, make_bronze, rows, spec_for, sql


def _no_spark() -> SparkSession:
    raise AssertionError("this run must not start Spark")


def _maintenance(spark: SparkSession, path: str, *, vacuum: bool = True) -> int:
    """OPTIMIZE, a property change and (with `vacuum`, which deletes every file the current
    version does not need) a VACUUM START and END on bronze: commits that change no row.
    Returns bronze's latest version."""
    sql(spark, path, "OPTIMIZE {t}")
    sql(spark, path, "ALTER TABLE {t} SET TBLPROPERTIES ('owner.team' = 'sales')")
    if vacuum:
        DeltaTable(path).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    return int(DeltaTable(path).version())


def test_commits_without_data_advance_the_watermark_without_spark_and_later_runs_build_on_it(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    insert(spark, spec.source, [(3, "cy", 30)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    silver_before = int(DeltaTable(spec.target).version())
    latest = _maintenance(spark, spec.source)

    advanced = PipelineRunner.on(control, _no_spark).run(spec)
    assert (advanced.mode, advanced.spark_started) == (RunMode.ADVANCE, False)
    assert (advanced.start_version, advanced.end_version, advanced.watermark_after) == (
        3,
        latest,
        latest,
    )
    assert (advanced.rows_inserted, advanced.rows_updated, advanced.rows_deleted) == (0, 0, 0)
    # One silver commit, of no data, carrying the txn and the run's description.
    silver = DeltaTable(spec.target)
    assert int(silver.version()) == silver_before + 1
    assert silver.transaction_version(spec.id) == latest
    assert read_silver_state(spec.target, spec.id).last_run["mode"] == "advance"  # type: ignore[index]
    assert rows(spark, spec.target) == rows(spark, spec.source)
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", silver_before + 1)
        .load(spec.target)
    )
    assert changes.count() == 0
    assert control.read_states()[spec.id]["last_commit_version"] == latest
    advance_row = control.read_log(spec.id)[-1]
    assert advance_row["mode"] == "advance"
    # An advance reads no change set; its commit of no data is marked.
    assert advance_row["read_at"] is None
    assert advance_row["planned_at"] <= advance_row["committed_at"] <= advance_row["finished_at"]
    status = pipeline_status(spec, control)
    assert (status.state.value, status.watermark, status.version_lag) == ("OK", latest, 0)

    # Data commits followed by more maintenance: Spark applies them on top.
    insert(spark, spec.source, [(4, "dee", 40)])
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    latest = _maintenance(spark, spec.source, vacuum=False)
    applied = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (applied.mode, applied.watermark_after) == (RunMode.INCREMENTAL, latest)
    assert (applied.rows_inserted, applied.rows_updated) == (1, 1)
    assert rows(spark, spec.target) == rows(spark, spec.source)
    assert read_silver_state(spec.target, spec.id).watermark == latest


def test_a_schema_change_without_rows_still_runs_on_spark(spark: SparkSession, lake: Path) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "ALTER TABLE {t} ADD COLUMNS (note STRING)")
    sql(spark, spec.source, "OPTIMIZE {t}")

    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.mode is RunMode.INCREMENTAL
    assert result.watermark_after == int(DeltaTable(spec.source).version())


def test_a_silver_protocol_deltalake_cannot_write_takes_the_range_through_spark(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    spark.sql(
        f"ALTER TABLE {sql_path(spec.target)} SET TBLPROPERTIES "
        "('delta.enableInCommitTimestamps' = 'true')"
    )
    empty = DeltaTable(spec.source).to_pyarrow_table().slice(0, 0)
    write_deltalake(spec.source, empty, mode="append")  # another writer's commit of no row
    latest = int(DeltaTable(spec.source).version())
    assert plan_pipeline(spec, control).mode is RunMode.ADVANCE

    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (result.mode, result.spark_started, result.watermark_after) == (
        RunMode.INCREMENTAL,
        True,
        latest,
    )
    assert read_silver_state(spec.target, spec.id).watermark == latest
    assert rows(spark, spec.target) == rows(spark, spec.source)
