"""Snapshot rebuild: the classic outage timeline, commits in the pinned gap, quiet reconcile,
source resets and schema changes."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import ReplayWindowLost, SourceReset
from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.core.sql import sql_path
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.run import PipelineRunner
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.bronze import (
    commit_feed,
    control_for,
    drop_column,
    insert,
    make_bronze,
    rows,
    spec_for,
    sql,
)


def test_classic_outage_timeline_is_detected_before_any_read_and_rebuilt_exactly(
    spark: SparkSession, lake: Path
) -> None:
    """Watermark W; 150 versions of updates and deletes while the consumer is paused; VACUUM
    removes the files a replay needs; the consumer resumes."""
    spec = spec_for(lake, fallback_mode="SNAPSHOT_REBUILD")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(i, f"n{i}", i) for i in range(1, 201)])
    sql(
        spark,
        spec.source,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = "
        "'interval 1 seconds', 'delta.enableDeletionVectors' = 'false')",
    )
    first = PipelineRunner.on(control, lambda: spark).run(spec)
    watermark = first.watermark_after
    assert watermark == 2

    # 150 versions: 100 single-row updates and 50 single-row deletes, interleaved, written by
    # another engine (delta-rs, with change data files) as bronze often is; it is also ~100x
    # faster than 150 Spark commits.
    writer = DeltaTable(spec.source)
    for step in range(150):
        key = step + 1
        if step % 3 == 2:
            writer.delete(f"id = {key}")
        else:
            writer.update(updates={"amount": "amount + 1000"}, predicate=f"id = {key}")
    time.sleep(1.5)  # every needed file is now older than the 1 s retention
    session = spark.newSession()
    session.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    session.sql(f"VACUUM {sql_path(spec.source)} RETAIN 0 HOURS")
    latest = DeltaTable(spec.source).version()
    assert latest >= watermark + 150

    status = pipeline_status(spec, control)
    assert status.state is WindowState.LOST
    assert status.problem_code == "WATERMARK_OUTSIDE_RETENTION"
    runner = PipelineRunner.on(control, lambda: spark)
    prepared = runner.prepare(spec)
    plan = prepared.plan
    assert plan.mode is RunMode.REBUILD  # decided from the logs, before any read
    assert plan.problem is not None and plan.problem.incident_code == status.problem_code

    result = runner.finish(prepared)
    assert result.mode is RunMode.REBUILD
    assert result.watermark_after == latest
    assert read_silver_state(spec.target, spec.id).watermark == latest
    assert rows(spark, spec.target) == rows(spark, spec.source)
    assert len(rows(spark, spec.target)) == 200 - 50
    incident = control.read_log(spec.id)[-1]
    assert (incident["mode"], incident["incident_code"]) == (
        "rebuild",
        "WATERMARK_OUTSIDE_RETENTION",
    )
    assert (incident["watermark_before"], incident["watermark_after"]) == (watermark, latest)

    insert(spark, spec.source, [(500, "new", 5)])
    after = PipelineRunner.on(control, lambda: spark).run(spec)
    assert after.mode is RunMode.INCREMENTAL
    assert (after.start_version, after.end_version) == (latest + 1, latest + 1)
    assert rows(spark, spec.target) == rows(spark, spec.source)


def test_commit_landing_after_the_pinned_version_waits_for_the_next_run(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 2

    runner = PipelineRunner.on(control, lambda: spark)
    prepared = runner.prepare(spec)  # pins V = 2
    assert prepared.plan.end_version == 2
    insert(spark, spec.source, [(3, "cy", 30)])  # 3: lands in the gap
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")  # 4
    rebuilt = runner.finish(prepared, force_rebuild=True)
    assert rebuilt.watermark_after == 2
    assert rows(spark, spec.target) == [(1, "ada", 11), (2, "bob", 20)]

    after = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (after.mode, after.start_version, after.end_version) == (RunMode.INCREMENTAL, 3, 4)
    assert rows(spark, spec.target) == [(1, "ada", 11), (3, "cy", 30)]


def test_a_failed_snapshot_read_names_the_snapshot_not_a_change_feed_range(
    spark: SparkSession, lake: Path
) -> None:
    """The data files of the pinned snapshot are deleted before a requested rebuild."""
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    PipelineRunner.on(control, lambda: spark).run(spec)  # watermark 1
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 2
    silver_version = DeltaTable(spec.target).version()
    for data_file in Path(spec.source).glob("*.parquet"):
        data_file.unlink()

    with pytest.raises(ReplayWindowLost) as failed:
        PipelineRunner.on(control, lambda: spark).run(spec, force_rebuild=True)
    problem = failed.value.problem
    assert problem.startswith(
        "the files can no longer be read for bronze snapshot at version 2 ("
    ), problem
    assert "change feed" not in problem
    assert (failed.value.pipeline_id, failed.value.version) == (spec.id, 2)
    # Not "rebuild silver": that is what just failed.
    assert failed.value.action.startswith("rerun: the rebuild pins bronze's latest version")
    assert DeltaTable(spec.target).version() == silver_version


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_rebuild_writes_only_real_differences_to_silver_change_feed(
    spark: SparkSession, lake: Path, delete_mode: str
) -> None:
    spec = spec_for(lake, delete_mode=delete_mode)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(i, f"n{i}", i) for i in range(1, 11)])
    PipelineRunner.on(control, lambda: spark).run(spec)

    quiet = PipelineRunner.on(control, lambda: spark).run(spec, force_rebuild=True)
    assert quiet.mode is RunMode.REBUILD
    assert commit_feed(spark, spec.target, DeltaTable(spec.target).version()) == []
    assert (quiet.rows_inserted, quiet.rows_updated, quiet.rows_deleted) == (0, 0, 0)

    # k = 3 real differences: silver drifted on two rows and lost one.
    sql(spark, spec.target, "UPDATE {t} SET amount = -1 WHERE id IN (3, 4)")
    sql(spark, spec.target, "DELETE FROM {t} WHERE id = 5")
    fixed = PipelineRunner.on(control, lambda: spark).run(spec, force_rebuild=True)
    changes = commit_feed(spark, spec.target, DeltaTable(spec.target).version())
    assert [c for c in changes if c[1] != "update_preimage"] == [
        (3, "update_postimage"),
        (4, "update_postimage"),
        (5, "insert"),
    ]
    assert (fixed.rows_inserted, fixed.rows_updated, fixed.rows_deleted) == (1, 2, 0)
    assert rows(spark, spec.target) == rows(spark, spec.source)


def test_recreated_bronze_table_is_a_source_reset(spark: SparkSession, lake: Path) -> None:
    spec = spec_for(lake, fallback_mode="FAIL_FAST")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    PipelineRunner.on(control, lambda: spark).run(spec)
    silver_version = DeltaTable(spec.target).version()

    shutil.rmtree(spec.source)
    make_bronze(spark, spec.source, [(7, "new", 70)])
    sql(spark, spec.source, "UPDATE {t} SET amount = 71 WHERE id = 7")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (8, 'newer', 80)")  # latest 3 > watermark 2
    with pytest.raises(SourceReset, match="table id changed"):
        PipelineRunner.on(control, lambda: spark).run(spec)
    assert DeltaTable(spec.target).version() == silver_version
    last = control.read_log(spec.id)[-1]
    assert (last["outcome"], last["incident_code"]) == ("FAILED", "SOURCE_RESET")

    rebuild_spec = spec.model_copy(update={"fallback_mode": FallbackMode.SNAPSHOT_REBUILD})
    result = PipelineRunner.on(control, lambda: spark).run(rebuild_spec)
    assert (result.mode, result.incident_code, result.watermark_after) == (
        RunMode.REBUILD,
        "SOURCE_RESET",
        3,
    )
    assert rows(spark, spec.target) == [(7, "new", 71), (8, "newer", 80)]
    # The reset opened a new generation: later changes apply over rows from the old table.
    sql(spark, spec.source, "UPDATE {t} SET amount = 72 WHERE id = 7")
    assert PipelineRunner.on(control, lambda: spark).run(rebuild_spec).mode is (RunMode.INCREMENTAL)
    assert rows(spark, spec.target) == [(7, "new", 72), (8, "newer", 80)]


def test_bronze_behind_the_watermark_is_a_source_reset(
    spark: SparkSession, lake: Path, tmp_path: Path
) -> None:
    """Bronze restored from an older copy of itself: same table id, latest < watermark."""
    spec = spec_for(lake, fallback_mode="FAIL_FAST")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    backup = tmp_path / "backup"
    shutil.copytree(spec.source, backup)
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    PipelineRunner.on(control, lambda: spark).run(spec)  # watermark 3
    silver_version = DeltaTable(spec.target).version()

    shutil.rmtree(spec.source)
    shutil.copytree(backup, spec.source)  # latest version 1, same table id
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    with pytest.raises(SourceReset, match="below the watermark 3"):
        PipelineRunner.on(control, lambda: spark).run(spec)
    assert DeltaTable(spec.target).version() == silver_version
    assert control.read_log(spec.id)[-1]["incident_code"] == "SOURCE_RESET"

    rebuild_spec = spec.model_copy(update={"fallback_mode": FallbackMode.SNAPSHOT_REBUILD})
    result = PipelineRunner.on(control, lambda: spark).run(rebuild_spec)
    assert (result.mode, result.watermark_before, result.watermark_after) == (RunMode.REBUILD, 3, 1)
    assert read_silver_state(spec.target, spec.id).watermark == 1
    assert rows(spark, spec.target) == [(1, "ada", 10), (2, "bob", 20)]


def test_added_column_flows_to_silver(spark: SparkSession, lake: Path) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "ALTER TABLE {t} ADD COLUMNS (tier STRING)")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (2, 'bob', 20, 'gold')")
    sql(spark, spec.source, "UPDATE {t} SET tier = 'silver' WHERE id = 1")

    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.mode is RunMode.INCREMENTAL
    assert rows(spark, spec.target) == [(1, "ada", 10, "silver"), (2, "bob", 20, "gold")]


def test_column_dropped_in_the_first_version_after_the_watermark_is_not_replayed(
    spark: SparkSession, lake: Path
) -> None:
    """Delta reads [W + 1, L] across a schema change at W + 1 itself without complaint, but
    silver follows the schema before it: the run must rebuild (retiring the column) rather
    than MERGE rows that leave stale values in it."""
    spec = spec_for(lake, fallback_mode="SNAPSHOT_REBUILD")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    watermark = PipelineRunner.on(control, lambda: spark).run(spec).watermark_after
    narrower = spark.createDataFrame([(1, "ada2"), (2, "bob")], "id BIGINT, name STRING")
    narrower.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
        spec.source
    )  # version W + 1: `amount` dropped by an overwrite
    insert_narrow = spark.createDataFrame([(3, "cy")], "id BIGINT, name STRING")
    insert_narrow.write.format("delta").mode("append").save(spec.source)
    assert watermark is not None

    assert pipeline_status(spec, control).state is WindowState.LOST
    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (result.mode, result.incident_code) == (RunMode.REBUILD, "INCOMPATIBLE_SCHEMA_CHANGE")
    assert rows(spark, spec.target, "id", "name", "amount") == [
        (1, "ada2", None),
        (2, "bob", None),
        (3, "cy", None),
    ]


def test_a_soft_deleted_key_reinserted_after_a_column_is_retired_does_not_revive_its_old_value(
    spark: SparkSession, lake: Path
) -> None:
    """Soft delete, drop a column, rebuild, re-insert the deleted key: the retired column is NULL
    on every row after the rebuild, and the re-inserted row does not bring the old value back."""
    spec = spec_for(lake, fallback_mode="SNAPSHOT_REBUILD", delete_mode="soft")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    assert PipelineRunner.on(control, lambda: spark).run(spec).mode is (RunMode.INCREMENTAL)
    drop_column(spark, spec.source, "amount")

    rebuilt = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (rebuilt.mode, rebuilt.incident_code) == (RunMode.REBUILD, "INCOMPATIBLE_SCHEMA_CHANGE")
    columns = ("id", "name", "amount", "_is_deleted")
    assert rows(spark, spec.target, *columns) == [(1, "ada", None, False), (2, "bob", None, True)]

    sql(spark, spec.source, "INSERT INTO {t} VALUES (2, 'bob again')")
    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.mode is RunMode.INCREMENTAL
    assert rows(spark, spec.target, *columns) == [
        (1, "ada", None, False),
        (2, "bob again", None, False),
    ]
