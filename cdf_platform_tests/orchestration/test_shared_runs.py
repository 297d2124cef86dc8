"""Pipelines with small runs (small change sets, small initial loads) share a run (one process,
one Spark driver), each its own step, watermark and failure: a pipeline that fails in a shared
run fails alone, classified, and is not asked the same thing again; the others are applied
exactly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

import cdf_platform.state.control as control_module
from cdf_platform.core.faults import FAULT_ENV, FAULT_EXIT_CODE, FaultPoint
from cdf_platform.orchestration.sensors.incremental_sensor import (
    silver_queue_full,
    silver_run_slots,
)
from cdf_platform.orchestration.shared.keys import (
    QUEUE_TAG,
    REQUESTED_TAG,
    SILVER_QUEUE,
    silver_key,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.status import pipeline_status
from cdf_platform_testkit.deployment import DEPLOY
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_tests.lake_platform import incremental_tick as tick
from cdf_platform_tests.lake_platform import lake_defs, run_as_daemon, table_rows

CONTROL_TABLES = ("load_log", "pipeline_state")


def test_small_runs_share_a_run_and_a_failing_pipeline_fails_alone(
    spark: SparkSession, spark_resource: SparkResource, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run's control rows are written at its end, not when the first is 5 s old (each of
    # this machine's steps may take that long).
    monkeypatch.setattr(control_module, "HELD_AT_MOST_S", 600.0)
    ids = ["a", "b", "c"]
    # c derives a column from one bronze does not have: its runs fail, classified. a's `where`
    # (it keeps every row) makes its runs Spark's, b's are deltalake's.
    bad = {"columns": {"doubled": "no_such_column * 2"}}
    spark_only = {"where": "order_id IS NOT NULL"}
    pipelines = [
        orders_pipeline("a", **spark_only),
        orders_pipeline("b"),
        orders_pipeline("c", **bad),
    ]
    defs = lake_defs(spark_resource, lake, *pipelines)
    instance = dg.DagsterInstance.ephemeral()
    for pipeline_id in ids:
        write_orders_batch(str(lake / "bronze" / pipeline_id), batch_size=20)

    # Three small initial loads: one run, each pipeline its own step and failure.
    (first,) = tick(defs, instance).run_requests
    assert first.run_key.startswith("batch:")
    assert sorted(first.asset_selection) == sorted(silver_key(i) for i in ids)
    result = run_as_daemon(defs, instance, first)
    assert not result.success
    (failure,) = result.get_step_failure_events()
    assert failure.step_key == silver_key("c").to_python_identifier()
    error = failure.step_failure_data.error
    assert error is not None
    assert "InvalidPipelineSpec" in error.message and "columns.doubled" in error.message
    for pipeline_id in ("a", "b"):
        silver, bronze = lake / "silver" / pipeline_id, lake / "bronze" / pipeline_id
        assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze))
    assert not (lake / "silver" / "c").exists()  # nothing written for the failing pipeline

    # c failed in its own code at its bronze's version: not asked again until bronze moves (or
    # a person fixes it); a and b's small change sets share a run.
    quiet = tick(defs, instance)
    assert not quiet.run_requests
    assert f"c (run {result.run_id[:8]} failed at 1)" in str(quiet.skip_reason)
    for pipeline_id in ("a", "b"):
        write_orders_batch(str(lake / "bronze" / pipeline_id), batch_size=10)
    (shared,) = tick(defs, instance).run_requests
    assert shared.run_key.startswith("batch:")
    assert shared.tags[REQUESTED_TAG] == "a=incremental:2,b=incremental:2"
    control = lake / "_control"
    versions = {name: DeltaTable(str(control / name)).version() for name in CONTROL_TABLES}
    shared_result = run_as_daemon(defs, instance, shared)
    assert shared_result.success
    # b's JVM-free step went first: it did not wait behind a's Spark step.
    starts = instance.all_logs(shared_result.run_id, of_type=dg.DagsterEventType.STEP_START)
    silver_steps = {silver_key(i).to_python_identifier(): i for i in ("a", "b")}
    assert [silver_steps[e.step_key] for e in starts if e.step_key in silver_steps] == ["b", "a"]
    for pipeline_id in ("a", "b"):
        silver, bronze = lake / "silver" / pipeline_id, lake / "bronze" / pipeline_id
        assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze))
    # The shared run held its control rows and wrote them together: one commit to each table
    # for both pipelines, every row there.
    after = {name: DeltaTable(str(control / name)).version() for name in CONTROL_TABLES}
    assert {name: after[name] - versions[name] for name in CONTROL_TABLES} == {
        "load_log": 1,
        "pipeline_state": 1,
    }
    layout = LakeLayout(lake_root=str(lake), pipelines_file=str(lake / "pipelines.yaml")).bound()
    newest = {r["pipeline_id"]: r for r in layout.control().read_log()}
    assert [(newest[i]["outcome"], newest[i]["watermark_before"]) for i in "ab"] == [
        ("SUCCESS", 1),
        ("SUCCESS", 1),
    ]
    assert [newest[i]["watermark_after"] for i in "ab"] == [2, 2]
    states = layout.control().read_states()
    assert [states[i]["last_commit_version"] for i in ("a", "b")] == [2, 2]

    # A lone pipeline behind gets a run of its own.
    write_orders_batch(str(lake / "bronze" / "a"), batch_size=10)
    (only_a,) = tick(defs, instance).run_requests
    assert only_a.asset_selection == [silver_key("a")]
    assert only_a.run_key == "incremental:a:3"


def test_silver_run_slots_are_the_run_queues_lowest_limit_on_silver_runs(tmp_path: Path) -> None:
    assert silver_run_slots(dg.DagsterInstance.ephemeral()) is None  # no run queue
    deployed = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    queue = {key: deployed[key] for key in ("run_coordinator", "concurrency")}
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(queue))
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert silver_run_slots(instance) == 4  # deploy/dagster.yaml: 4 silver runs of 5
    runs = queue["concurrency"]["runs"]
    for rules, slots in (
        ([], 5),  # all runs' limit
        ([{"key": QUEUE_TAG, "limit": 3}], 3),  # the tag's, whatever its value
        ([{"key": QUEUE_TAG, "value": {"applyLimitPerUniqueValue": True}, "limit": 2}], 2),
        ([{"key": QUEUE_TAG, "value": "checks", "limit": 1}], 5),  # not silver's
    ):
        runs["tag_concurrency_limits"] = rules
        (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(queue))
        with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
            assert silver_run_slots(instance) == slots, rules


def test_the_silver_queue_is_full_when_a_silver_run_waits_behind_busy_slots(
    tmp_path: Path,
) -> None:
    deployed = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())
    queue = {key: deployed[key] for key in ("run_coordinator", "concurrency")}
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(queue))

    @dg.op
    def nothing() -> None:
        pass

    @dg.job
    def some_job() -> None:
        nothing()

    assert not silver_queue_full(dg.DagsterInstance.ephemeral())  # no run queue
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        instance.create_run_for_job(some_job, tags={QUEUE_TAG: "checks"})  # not a silver run
        silver = [
            instance.create_run_for_job(some_job, tags={QUEUE_TAG: SILVER_QUEUE}) for _ in range(4)
        ]
        assert not silver_queue_full(instance)  # deploy/dagster.yaml: 4 silver slots
        fifth = instance.create_run_for_job(some_job, tags={QUEUE_TAG: SILVER_QUEUE})
        assert silver_queue_full(instance)  # more silver runs than slots: one waits
        instance.report_run_failed(fifth)
        instance.report_run_canceled(silver[0])
        assert not silver_queue_full(instance)  # ended runs hold no slot


# A shared run in a process of its own, on the instance in $DAGSTER_HOME: its first silver step
# commits its MERGE and the process dies there (CDF_PLATFORM_FAULT=after_merge).
_SHARED_RUN = """
import sys
import dagster as dg
from cdf_platform.definitions import defs
job = defs().resolve_job_def("incremental_job")
keys = [dg.AssetKey(["silver", pipeline_id]) for pipeline_id in sys.argv[1].split(",")]
with dg.DagsterInstance.get() as instance:
    job.execute_in_process(instance=instance, asset_selection=keys, tags=dict(job.tags))
"""


def test_a_shared_run_killed_mid_way_leaves_every_watermark_exact_and_the_next_tick_finishes(
    spark: SparkSession, spark_resource: SparkResource, lake: Path, tmp_path: Path
) -> None:
    ids = ["a", "b", "c"]
    defs = lake_defs(spark_resource, lake, *(orders_pipeline(i) for i in ids))
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    instance = dg.DagsterInstance.from_config(str(home))
    for pipeline_id in ids:
        write_orders_batch(str(lake / "bronze" / pipeline_id), batch_size=20)
    for request in tick(defs, instance).run_requests:
        assert run_as_daemon(defs, instance, request).success
    for pipeline_id in ids:
        write_orders_batch(str(lake / "bronze" / pipeline_id), batch_size=10)
    (shared,) = tick(defs, instance).run_requests
    assert len(shared.asset_selection) == 3

    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "CDF_LAKE_ROOT": str(lake),
        "CDF_PIPELINES_FILE": str(lake / "pipelines.yaml"),
        "CDF_SPARK_MASTER": "local[1]",
        FAULT_ENV: FaultPoint.AFTER_MERGE.value,
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
    }
    selection = ",".join(key.path[1] for key in shared.asset_selection)
    died = subprocess.run(
        [sys.executable, "-c", _SHARED_RUN, selection], env=env, capture_output=True, timeout=300
    )
    assert died.returncode == FAULT_EXIT_CODE, died.stderr.decode()[-2000:]
    (record,) = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    instance.report_run_failed(record.dagster_run)  # what the code server does for a lost process

    # The first pipeline's MERGE committed with its watermark; the others are untouched.
    bound = LakeLayout(lake_root=str(lake), pipelines_file=str(lake / "pipelines.yaml")).bound()
    watermarks = {
        spec.id: pipeline_status(spec, bound.control()).watermark for spec in bound.specs()
    }
    assert sorted(watermarks.values()) == [1, 1, 2], watermarks
    behind = sorted(i for i in ids if watermarks[i] == 1)

    # The next tick asks for the rest only; then every silver is exact.
    (rest,) = tick(defs, instance).run_requests
    assert sorted(key.path[1] for key in rest.asset_selection) == behind
    assert rest.tags[REQUESTED_TAG] == ",".join(f"{i}=incremental:2" for i in behind)
    assert run_as_daemon(defs, instance, rest).success
    for pipeline_id in ids:
        silver, bronze = lake / "silver" / pipeline_id, lake / "bronze" / pipeline_id
        assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze))
    assert not tick(defs, instance).run_requests
