"""A snapshot source (`changes: snapshots`): bronze without a change feed, overwritten whole by
another tool, is read at a pinned version and reconciled into silver; only the rows that changed
reach silver's change feed, a run with nothing new starts no JVM, and VACUUM keeps nothing for
it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import CdfNotEnabled
from cdf_platform.core.spec.modes import ChangeSource
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.planning.vacuum import plan_vacuum
from cdf_platform.run import PipelineRunner
from cdf_platform_tests.bronze import commit_feed, control_for, rows, spec_for
from cdf_platform_tests.lake_platform import control_for as lake_control_for
from cdf_platform_tests.lake_platform import (
    incremental_tick,
    materialization,
    materialize,
    run_as_daemon,
    table_rows,
)

SCHEMA = "id INT, name STRING, amount INT"


def overwrite(spark: SparkSession, path: str, data: list[tuple[Any, ...]]) -> None:
    """Bronze as a dump lands: the whole table overwritten, no change feed."""
    spark.createDataFrame(data, SCHEMA).write.format("delta").mode("overwrite").save(path)


def silver_feed(spark: SparkSession, target: str) -> list[tuple[Any, ...]]:
    """Silver's change feed of its latest commit: (id, change type, amount), pre-images left
    out."""
    feed = commit_feed(spark, target, DeltaTable(target).version(), "amount")
    return [change for change in feed if change[1] != "update_preimage"]


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_an_overwritten_bronze_without_cdf_is_reconciled_run_by_run(
    spark: SparkSession, lake: Path, delete_mode: str
) -> None:
    spec = spec_for(lake, changes="snapshots", delete_mode=delete_mode)
    control = control_for(lake)

    def run() -> Any:
        return PipelineRunner.on(control, lambda: spark).run(spec)

    overwrite(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])  # 0
    assert "delta.enableChangeDataFeed" not in DeltaTable(spec.source).metadata().configuration
    first = run()
    assert (first.mode, first.watermark_after) == (RunMode.INITIAL_LOAD, 0)
    assert rows(spark, spec.target, "id", "name", "amount") == [
        (1, "ada", 10),
        (2, "bob", 20),
        (3, "cy", 30),
    ]

    # The next dump: one update, one delete, one insert, one row as it was.
    overwrite(spark, spec.source, [(1, "ada", 11), (3, "cy", 30), (4, "dee", 40)])  # 1
    second = run()
    assert (second.mode, second.watermark_before, second.watermark_after) == (
        RunMode.SNAPSHOT,
        0,
        1,
    )
    assert (second.rows_inserted, second.rows_updated, second.rows_deleted) == (1, 1, 1)
    gone = (2, "update_postimage", 20) if delete_mode == "soft" else (2, "delete", 20)
    assert silver_feed(spark, spec.target) == [(1, "update_postimage", 11), gone, (4, "insert", 40)]
    live = [(1, "ada", 11), (3, "cy", 30), (4, "dee", 40)]
    if delete_mode == "soft":
        assert rows(spark, spec.target, "id", "_is_deleted") == [
            (1, False),
            (2, True),
            (3, False),
            (4, False),
        ]
    else:
        assert rows(spark, spec.target, "id", "name", "amount") == live

    # Nothing new in bronze: a no-op that never starts Spark.
    idle = run()
    assert (idle.mode, idle.spark_started) == (RunMode.NOOP, False)

    # A dump identical to the last one is a new version, and changes no silver row.
    overwrite(spark, spec.source, [(1, "ada", 11), (3, "cy", 30), (4, "dee", 40)])  # 2
    silver_version = DeltaTable(spec.target).version()
    same = run()
    assert (same.mode, same.watermark_after) == (RunMode.SNAPSHOT, 2)
    assert (same.rows_inserted, same.rows_updated, same.rows_deleted) == (0, 0, 0)
    assert DeltaTable(spec.target).version() == silver_version + 1  # the watermark's commit
    assert silver_feed(spark, spec.target) == []


def test_a_snapshot_source_is_measured_and_never_holds_vacuum_back(
    spark: SparkSession, lake: Path
) -> None:
    """Lag is measured as for a change-feed pipeline; no replay window closes on a snapshot
    source (no headroom), so VACUUM keeps no history for it; the same table as a change-feed
    pipeline is refused, naming the field to set."""
    spec = spec_for(lake, changes="snapshots")
    control = control_for(lake)
    overwrite(spark, spec.source, [(1, "ada", 10)])
    cdf = spec.model_copy(update={"changes": ChangeSource.CDF})
    with pytest.raises(CdfNotEnabled) as refused:
        PipelineRunner.on(control, lambda: spark).run(cdf)
    assert "set `changes: snapshots` on the pipeline" in str(refused.value.action)
    PipelineRunner.on(control, lambda: spark).run(spec)
    overwrite(spark, spec.source, [(1, "ada", 11)])
    overwrite(spark, spec.source, [(1, "ada", 12)])

    status = pipeline_status(spec, control)
    assert (status.state, status.version_lag, status.headroom_hours) == (WindowState.OK, 2, None)
    assert status.lag_hours is not None and status.lag_hours > 0
    # No history is replayed: no earliest replayable version (not one past the latest).
    assert (status.latest_version, status.earliest_replayable_version) == (2, None)
    decision = plan_vacuum(spec.source, [spec], control=control)
    (need,) = decision.consumers
    assert (need.first_needed_version, need.needed_hours) == (None, 0.0)
    assert decision.will_vacuum


def test_a_snapshot_source_runs_through_dagster_and_its_check_says_what_it_reads(
    spark: SparkSession, spark_resource: SparkResource, tmp_path: Path
) -> None:
    """The silver asset of a snapshot source: the first materialization loads, the next
    reconciles the new dump (`mode: snapshot`); the incremental sensor requests it when bronze
    moves, and its replay_window check passes naming it a snapshot source, with no headroom."""
    lake = tmp_path / "lake"
    lake.mkdir()
    pipeline = {
        "id": "dump",
        "source": "bronze/dump",
        "target": "silver/dump",
        "keys": ["id"],
        "changes": "snapshots",
    }
    defs = build_defs(lake_control_for(lake, pipeline), spark_resource, automation=False)
    instance = dg.DagsterInstance.ephemeral()
    silver = silver_key("dump")
    overwrite(spark, str(lake / "bronze" / "dump"), [(1, "ada", 10), (2, "bob", 20)])
    first = materialization(materialize(defs, silver, instance=instance), silver)
    assert (first["mode"], first["watermark_after"]) == ("initial_load", 0)

    overwrite(spark, str(lake / "bronze" / "dump"), [(1, "ada", 11)])
    (request,) = incremental_tick(defs, instance).run_requests
    assert list(request.asset_selection) == [silver]
    second = materialization(run_as_daemon(defs, instance, request), silver)
    assert (second["mode"], second["watermark_after"]) == ("snapshot", 1)
    assert (second["rows_updated"], second["rows_deleted"]) == (1, 1)
    assert table_rows(spark, str(lake / "silver" / "dump")) == [(1, "ada", 11)]

    checks = defs.resolve_job_def("checks_job").execute_in_process(instance=instance)
    window = {
        e.check_name: e for e in checks.get_asset_check_evaluations() if e.asset_key == silver
    }["replay_window"]
    assert window.passed
    assert window.description == (
        "a snapshot source: each run reconciles bronze's latest version, no history to replay"
    )
    assert "headroom_hours" not in window.metadata  # no history replayed: no deadline
    assert "earliest_replayable_version" not in window.metadata
