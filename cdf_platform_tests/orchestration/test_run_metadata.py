"""A silver run pins `(watermark, latest]` from the logs alone (no Spark job), per pipeline, and
records what it did as typed metadata: numbers stay numbers (hours and seconds rounded to 2
decimals), and an absent figure reads "none", never "null". Where its seconds went is in its
metadata and its load-log row, from Dagster's creating the run (through the queued run
coordinator and its daemon on a real instance) to the row."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
    QueuedRunCoordinatorDaemon,
)
from pyspark.sql import SparkSession

from cdf_platform.core.config import (
    AUTOMATION_ENV,
    LAKE_ROOT_ENV,
    MASTER_ENV,
    PIPELINES_FILE_ENV,
)
from cdf_platform.orchestration.io_manager.silver_io import run_result_metadata
from cdf_platform.orchestration.jobs.silver_jobs import INCREMENTAL_JOB
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.plan import RunMode, plan_pipeline
from cdf_platform.planning.run_result import RunResult
from cdf_platform.window.replay_window import ConsumerAssessment
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    control_for,
    lake_defs,
    last_spark_job_id,
    materialize,
)


def test_each_pipeline_pins_its_change_set_from_the_logs_without_spark(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    # Two pipelines read bronze/orders; each is planned against its own watermark.
    audit = {**ORDERS, "id": "orders_audit", "target": "silver/orders_audit"}
    defs = lake_defs(spark_resource, lake, ORDERS, audit)
    bronze_batch(defs, "orders", dg.DagsterInstance.ephemeral(), 10)  # version 1
    layout = control_for(lake, ORDERS, audit)

    spark_jobs = last_spark_job_id(spark)
    plans = {
        pipeline_id: plan_pipeline(layout.spec(pipeline_id), layout.control())
        for pipeline_id in ("orders", "orders_audit")
    }
    assert last_spark_job_id(spark) == spark_jobs

    for pipeline_id, plan in plans.items():
        assert plan.spec.id == pipeline_id
        assert plan.spec.target == str(lake / "silver" / pipeline_id)
        assert (plan.mode, plan.watermark, plan.end_version) == (RunMode.INITIAL_LOAD, None, 1)
        assert plan.problem is None
        assert plan.describe() == f"{pipeline_id}: initial_load, bronze snapshot at version 1"


# The queued run coordinator, as deploy/dagster.yaml has it; the run launched in this process.
QUEUED = {
    "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}
}
LOCATION = "cdf_platform"


def _status(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRunStatus | None:
    run = instance.get_run_by_id(run_id)
    return run.status if run is not None else None


def _queued_run(instance: dg.DagsterInstance, job_name: str, asset: dg.AssetKey) -> str:
    """Run `job_name` on `asset` as a deployment does: the platform's definitions
    (`cdf_platform.definitions`, configured by the environment) as a code location, the run
    created and submitted to the queue, then taken off it by the queued run coordinator's
    daemon and launched (in this process: the instance's launcher is synchronous)."""
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="cdf_platform.definitions", attribute="defs"),
        location_name=LOCATION,
    )
    target = InProcessWorkspaceLoadTarget(origin)
    with create_test_daemon_workspace_context(target, instance) as workspace:
        context = workspace.create_request_context()
        location = context.get_code_location(LOCATION)
        (repository,) = location.get_repositories()
        remote_job = location.get_job(
            JobSubsetSelector(
                location_name=LOCATION,
                repository_name=repository,
                job_name=job_name,
                op_selection=None,
                asset_selection=[asset],
            )
        )
        plan = location.get_execution_plan(
            remote_job, {}, step_keys_to_execute=None, known_state=None, instance=instance
        )
        run = instance.create_run(
            job_name=job_name,
            run_id=None,
            run_config={},
            resolved_op_selection=None,
            step_keys_to_execute=None,
            status=None,
            op_selection=None,
            root_run_id=None,
            parent_run_id=None,
            tags=remote_job.run_tags,
            job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=frozenset([asset]),
            asset_check_selection=None,
            asset_graph=location.get_repository(repository).asset_graph,
        )
        instance.submit_run(run.run_id, context)
        assert _status(instance, run.run_id) is dg.DagsterRunStatus.QUEUED
        list(QueuedRunCoordinatorDaemon(interval_seconds=1).run_iteration(workspace))
    return run.run_id


def test_a_silver_materialization_records_typed_figures(
    spark_resource: SparkResource, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze_batch(defs, "orders", instance, 10)
    key = silver_key("orders")
    result = materialize(defs, key, instance=instance)
    (materialized,) = result.asset_materializations_for_node(key.to_python_identifier())
    metadata = materialized.metadata
    plotted = {
        name
        for name, value in metadata.items()
        if isinstance(value, (dg.IntMetadataValue, dg.FloatMetadataValue))
    }
    assert plotted == {
        "end_version",
        "watermark_after",
        "rows_inserted",
        "rows_updated",
        "rows_deleted",
        "version_lag_before",
        "lag_hours_before",
        "version_lag_after",
        "lag_hours_after",
        "duration_seconds",
        *(name for name in metadata if name.endswith("_seconds")),
    } - {"stage_queue_seconds", "stage_read_seconds"}  # stages this run has not: "none" below
    for name in plotted:
        value = metadata[name].value
        assert isinstance(value, int) or round(value, 2) == value, name
    assert isinstance(metadata["spark_started"], dg.BoolMetadataValue)
    # The range start of an initial load and a clean run's incident say "none" (Dagster shows
    # a null value as "null").
    assert (metadata["start_version"].value, metadata["end_version"].value) == ("none", 1)
    assert metadata["watermark_before"].value == "none"
    assert metadata["incident_code"].value == "none"
    assert not any(isinstance(value, dg.NullMetadataValue) for value in metadata.values())
    assert metadata["mode"].value == "initial_load"
    assert metadata["path"].value == str(lake / "silver" / "orders")
    # Where the run's seconds went, from Dagster's creating the run to its load-log row: the
    # run executed in process passed no queue, so it has no queue stage and its launch stage
    # runs from its creation; a snapshot read is part of its MERGE stage.
    assert metadata["dagster_run_id"].value == result.run_id
    assert metadata["stage_queue_seconds"].value == "none"
    assert metadata["stage_read_seconds"].value == "none"
    for stage in ("launch", "plan", "merge", "end"):
        assert isinstance(metadata[f"stage_{stage}_seconds"], dg.FloatMetadataValue), stage
        assert metadata[f"stage_{stage}_seconds"].value >= 0, stage
    record = instance.get_run_record_by_id(result.run_id)
    assert record is not None and record.start_time is not None
    (row,) = control_for(lake, ORDERS).control().read_log("orders")
    assert row["created_at"] == record.create_timestamp
    # The run's RUN_START event, which the run record's start time is taken from.
    assert abs(row["launched_at"].timestamp() - record.start_time) < 0.01
    assert row["dequeued_at"] is None
    marks = ("created_at", "launched_at", "started_at", "planned_at", "committed_at")
    assert [row[mark] for mark in marks] == sorted(row[mark] for mark in marks)

    # The next batch's incremental run through the queue, as the deployment runs it: every
    # stage is marked, in order, and each has its seconds.
    bronze_batch(defs, "orders", instance, 10)
    for name, value in (
        (LAKE_ROOT_ENV, str(lake)),
        (PIPELINES_FILE_ENV, str(lake / "pipelines.yaml")),
        (MASTER_ENV, "local[2]"),
        (AUTOMATION_ENV, "off"),
    ):
        monkeypatch.setenv(name, value)
    with dg.instance_for_test(overrides=QUEUED, synchronous_run_launcher=True) as deployed:
        run_id = _queued_run(deployed, INCREMENTAL_JOB, key)
        assert _status(deployed, run_id) is dg.DagsterRunStatus.SUCCESS
        event = deployed.get_latest_materialization_event(key)
        assert event is not None and event.asset_materialization is not None
        queued = event.asset_materialization.metadata
    assert (queued["mode"].value, queued["dagster_run_id"].value) == ("incremental", run_id)
    for stage in ("queue", "launch", "plan", "read", "merge", "end"):
        assert isinstance(queued[f"stage_{stage}_seconds"], dg.FloatMetadataValue), stage
        assert queued[f"stage_{stage}_seconds"].value >= 0, stage
    row = control_for(lake, ORDERS).control().read_log("orders")[-1]
    marks = (
        "created_at",
        "dequeued_at",
        "launched_at",
        "started_at",
        "planned_at",
        "read_at",
        "committed_at",
        "finished_at",
    )
    assert None not in [row[mark] for mark in marks]
    assert [row[mark] for mark in marks] == sorted(row[mark] for mark in marks)


def _assessment(watermark: int, latest: int, lag_hours: float) -> ConsumerAssessment:
    return ConsumerAssessment(
        watermark=watermark,
        latest_version=latest,
        version_lag=latest - watermark,
        data_version_lag=latest - watermark,
        lag_hours=lag_hours,
        first_unprocessed_version=watermark + 1 if latest > watermark else None,
        first_unprocessed_timestamp=None,
        first_unprocessed_timestamp_exact=True,
        earliest_replayable_version=0,
        replayable=True,
        window_break=None,
        headroom_hours=None,
        deadlines=(),
    )


NOOP = RunResult(
    pipeline_id="orders",
    run_id="r1",
    mode=RunMode.NOOP,
    start_version=None,
    end_version=None,
    watermark_before=4,
    watermark_after=4,
    rows_inserted=0,
    rows_updated=0,
    rows_deleted=0,
    duration_seconds=0.0123456,
    spark_started=False,
    lag_before=_assessment(4, 4, 0.0),
    lag_after=_assessment(4, 4, 0.0),
    timings={"plan": 0.00987},
)


def test_a_no_op_run_says_none_and_rounds_its_hours_and_seconds() -> None:
    metadata = run_result_metadata(replace(NOOP, lag_before=_assessment(4, 5, 0.000135900)))
    figures = {name: value.value for name, value in metadata.items()}
    assert figures["lag_hours_before"] == 0.0
    assert (figures["duration_seconds"], figures["plan_seconds"]) == (0.01, 0.01)
    assert (figures["start_version"], figures["end_version"]) == ("none", "none")
    assert (figures["watermark_before"], figures["watermark_after"]) == (4, 4)
    assert figures["incident_code"] == "none"
    assert isinstance(metadata["version_lag_before"], dg.IntMetadataValue)
    assert figures["version_lag_before"] == 1


def test_an_incident_is_named_with_its_message() -> None:
    metadata = run_result_metadata(
        replace(
            NOOP,
            mode=RunMode.REBUILD,
            incident_code="WATERMARK_OUTSIDE_RETENTION",
            incident_message="bronze versions 5..7 cannot be replayed",
        )
    )
    assert metadata["incident_code"].value == "WATERMARK_OUTSIDE_RETENTION"
    assert metadata["incident_message"].value == "bronze versions 5..7 cannot be replayed"


def test_a_rebuild_names_its_incident_without_the_remedy_it_carried_out() -> None:
    handled = (
        "ReplayWindowLost [pipeline=p1, version=5]: bronze versions 5..6 left the replay window, "
        "which now starts at version 7. What to do: run `cdf-platform rebuild p1`; it "
        "reconciles silver from a bronze snapshot.; spec edit of where: reconciled silver"
    )
    metadata = run_result_metadata(
        replace(
            NOOP,
            mode=RunMode.REBUILD,
            incident_code="WATERMARK_OUTSIDE_RETENTION",
            incident_message=handled,
        )
    )
    assert metadata["incident_message"].value == (
        "ReplayWindowLost [pipeline=p1, version=5]: bronze versions 5..6 left the replay window, "
        "which now starts at version 7; spec edit of where: reconciled silver"
    )
