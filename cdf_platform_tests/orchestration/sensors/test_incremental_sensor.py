"""The incremental sensor requests a silver run when bronze has versions after the watermark,
once per pipeline and bronze version and never while a run of the pipeline is pending, waits
for bronze tables that do not exist yet, and refreshes a caught-up silver asset's freshness
with a no-op run."""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.orchestration.jobs.silver_jobs import rebuild_run_config
from cdf_platform.orchestration.sensors.incremental_sensor import pending_pipelines
from cdf_platform.orchestration.shared.keys import (
    AUTO_RETRY_RUN_ID_TAG,
    FAILURE_REASON_TAG,
    PIPELINE_TAG,
    QUEUE_TAG,
    SILVER_QUEUE,
    WILL_RETRY_TAG,
    silver_key,
)
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    lake_defs,
    materialization,
    table_rows,
    vacuum_breaking_the_window,
)
from cdf_platform_tests.lake_platform import (
    incremental_tick as tick,
)


def test_new_bronze_versions_request_one_silver_run_per_pipeline_and_version(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake)  # orders and customers
    instance = dg.DagsterInstance.ephemeral()
    nothing = tick(defs, instance)
    assert not nothing.run_requests
    assert "orders (SOURCE_MISSING), customers (SOURCE_MISSING)" in str(nothing.skip_reason)

    bronze_batch(defs, "orders", instance, 10)  # version 1
    (request,) = tick(defs, instance).run_requests
    assert request.run_key == "incremental:orders:1"
    assert request.asset_selection == [silver_key("orders")]
    assert request.tags == {
        "cdf_platform/pipeline_id": "orders",
        "cdf_platform/requested": "orders=incremental:1",
    }

    run = defs.resolve_job_def("incremental_job").execute_in_process(
        instance=instance, asset_selection=request.asset_selection, tags=request.tags
    )
    assert materialization(run, silver_key("orders"))["mode"] == "initial_load"
    bronze, silver = lake / "bronze" / "orders", lake / "silver" / "orders"
    assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze))

    caught_up = tick(defs, instance)
    assert not caught_up.run_requests
    assert str(caught_up.skip_reason.skip_message) == (
        "nothing to request: held back: customers (SOURCE_MISSING); orders is up to date"
    )

    # An instance that never saw silver materialize (silver loaded elsewhere) has nothing for
    # silver's freshness to go by: one refresh run, a no-op without Spark, gives it that.
    fresh_instance = dg.DagsterInstance.ephemeral()
    (refresh,) = tick(defs, fresh_instance).run_requests
    assert refresh.run_key.startswith("refresh:orders:1:")
    run = defs.resolve_job_def("incremental_job").execute_in_process(
        instance=fresh_instance, asset_selection=refresh.asset_selection, tags=refresh.tags
    )
    figures = materialization(run, silver_key("orders"))
    assert (figures["mode"], figures["spark_started"]) == ("noop", False)
    assert not tick(defs, fresh_instance).run_requests


def test_no_run_is_requested_for_a_pipeline_whose_run_is_pending(
    spark_resource: SparkResource, lake: Path
) -> None:
    """A queued run covers every bronze version up to the latest at its start: new bronze
    commits while it waits add nothing to the queue; once it ends, the next tick requests the
    next run."""
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze_batch(defs, "orders", instance, 10)  # version 1
    (request,) = tick(defs, instance).run_requests
    # The run as the sensor's tick creates it, before the run coordinator queues it (queued
    # and running runs are pending alike).
    job = defs.resolve_job_def("incremental_job")
    queued = instance.create_run_for_job(
        job, asset_selection=frozenset(request.asset_selection), tags={**job.tags, **request.tags}
    )
    assert queued.status is dg.DagsterRunStatus.NOT_STARTED
    for _ in range(2):
        bronze_batch(defs, "orders", instance, 10)  # versions 2 and 3 while it waits
        waiting = tick(defs, instance)
        assert not waiting.run_requests
        # Neither up to date nor held back: its run is in progress, and says so.
        assert str(waiting.skip_reason.skip_message) == (
            f"nothing to request: orders has a run in progress ({queued.run_id[:8]})"
        )
    instance.report_run_failed(queued)  # its process died before it started
    (request,) = tick(defs, instance).run_requests
    assert request.run_key == f"incremental:orders:3:after:{queued.run_id[:8]}"


def test_a_run_that_died_is_requested_again_and_one_that_failed_in_its_code_is_not(
    spark_resource: SparkResource, lake: Path
) -> None:
    """A run whose process was killed (or that was canceled) left the pipeline behind at the
    same bronze version: the next tick's request names the dead run, so Dagster's run-key
    deduplication cannot drop it. A step failure would fail again at that version: its request
    keeps the version's run key (already used: no new run until bronze moves). A failed run
    Dagster's run retries will re-execute counts as pending until its retry exists."""
    defs = lake_defs(spark_resource, lake, {**ORDERS, "fallback_mode": "FAIL_FAST"})
    instance = dg.DagsterInstance.ephemeral()
    bronze_batch(defs, "orders", instance, 10)  # version 1
    (first,) = tick(defs, instance).run_requests
    assert first.run_key == "incremental:orders:1"

    # A step failure: a FAIL_FAST pipeline's rebuild without a person's override.
    failed = defs.resolve_job_def("rebuild_job").execute_in_process(
        instance=instance,
        asset_selection=[silver_key("orders")],
        tags={PIPELINE_TAG: "orders"},
        raise_on_error=False,
    )
    assert not failed.success
    assert failed.dagster_run.tags[FAILURE_REASON_TAG] == "STEP_FAILURE"
    (again,) = tick(defs, instance).run_requests
    assert again.run_key == "incremental:orders:1"

    job = defs.resolve_job_def("incremental_job")
    for end in ("killed", "canceled"):
        # Runs as the daemon creates them: the job's tags (its queue) with the request's.
        dead = instance.create_run_for_job(job, tags={**job.tags, PIPELINE_TAG: "orders"})
        if end == "killed":
            instance.report_run_failed(dead)  # as the code server reports a lost run process
        else:
            instance.report_run_canceled(dead)
        (retry,) = tick(defs, instance).run_requests
        assert retry.run_key == f"incremental:orders:1:after:{dead.run_id[:8]}"

    marked = instance.create_run_for_job(
        job, tags={**job.tags, PIPELINE_TAG: "orders", WILL_RETRY_TAG: "true"}
    )
    instance.report_run_failed(marked)
    waiting = tick(defs, instance)
    assert not waiting.run_requests
    assert f"orders has a run in progress ({marked.run_id[:8]})" in str(waiting.skip_reason)
    # Dagster's retry created (and, here, lost as well): the pipeline is requested again.
    instance.add_run_tags(marked.run_id, {AUTO_RETRY_RUN_ID_TAG: "a-retry-that-died"})
    (retry,) = tick(defs, instance).run_requests
    assert retry.run_key == f"incremental:orders:1:after:{marked.run_id[:8]}"


@contextlib.contextmanager
def one_storage(
    tmp_path: Path,
) -> Iterator[tuple[dg.DagsterInstance, dg.DagsterInstance]]:
    """Two instances on one storage: the first retries no run, so a failure it writes carries
    no retry decision (as a failure does between Dagster's two writes); the second retries
    runs, as the deployment's does."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    retries = {"run_retries": {"enabled": True, "max_retries": 2}}
    with (
        dg.instance_for_test(temp_dir=str(home)) as undecided,
        dg.instance_for_test(temp_dir=str(home), overrides=retries) as instance,
    ):
        yield undecided, instance


def test_a_run_that_just_failed_waits_for_dagsters_retry_decision(
    spark_resource: SparkResource, lake: Path, tmp_path: Path
) -> None:
    """A run's failure and Dagster's decision to retry it are two writes: between them the
    failed run still counts as pending, or the tick would request a run beside the coming
    retry (two queued runs of one pipeline)."""
    defs = lake_defs(spark_resource, lake, ORDERS)
    with one_storage(tmp_path) as (writer, instance):
        bronze_batch(defs, "orders", instance, 10)  # version 1
        job = defs.resolve_job_def("incremental_job")
        dead = writer.create_run_for_job(job, tags={**job.tags, PIPELINE_TAG: "orders"})
        writer.report_run_failed(dead)
        assert WILL_RETRY_TAG not in instance.get_run_by_id(dead.run_id).tags
        waiting = tick(defs, instance)
        assert not waiting.run_requests
        assert f"orders has a run in progress ({dead.run_id[:8]})" in str(waiting.skip_reason)
        # Decided (not retried): the pipeline is requested again at once.
        instance.add_run_tags(dead.run_id, {WILL_RETRY_TAG: "false"})
        (again,) = tick(defs, instance).run_requests
        assert again.run_key == f"incremental:orders:1:after:{dead.run_id[:8]}"


class Interleaved:
    """A real instance on which other processes write between a tick's reads of the runs:
    `writes[k]` right after the k-th read (1-based), as the daemons may."""

    def __init__(
        self, instance: dg.DagsterInstance, writes: dict[int, list[Callable[[], None]]]
    ) -> None:
        self._instance, self._writes = instance, writes
        self.reads = 0

    def get_run_records(self, *args: Any, **kwargs: Any) -> Any:
        records = self._instance.get_run_records(*args, **kwargs)
        self.reads += 1
        for write in self._writes.get(self.reads, []):
            write()
        return records

    def __getattr__(self, name: str) -> Any:
        return getattr(self._instance, name)


def test_a_dying_run_is_pending_in_a_tick_whichever_reads_its_writes_fall_between(
    tmp_path: Path,
) -> None:
    """A run whose process is found gone goes through four writes by Dagster's daemons:
    failed, decided on (will retry), its retry created, marked retried. Whichever of a tick's
    reads of the runs each write falls between (every placement: before the tick, after any
    read, after the tick), the run or its retry is pending in the tick, so no second run is
    requested beside the retry (two queued runs of one pipeline)."""
    with one_storage(tmp_path) as (marker, instance):
        # Four writes in their order, each before the tick (0) or after its read 1 to 4 (after
        # the tick when it reads less).
        placements = list(itertools.combinations_with_replacement(range(5), 4))
        for case, placement in enumerate(placements):
            pipeline = f"p{case}"

            def silver_run(
                status: dg.DagsterRunStatus, pipeline: str = pipeline, **parent: str
            ) -> dg.DagsterRun:
                return dg.DagsterRun(
                    job_name="incremental_job",
                    run_id=str(uuid.uuid4()),
                    asset_selection=frozenset({silver_key(pipeline)}),
                    status=status,
                    tags={QUEUE_TAG: SILVER_QUEUE, PIPELINE_TAG: pipeline},
                    **parent,
                )

            run = instance.add_run(silver_run(dg.DagsterRunStatus.STARTED))
            retry = silver_run(
                dg.DagsterRunStatus.NOT_STARTED, parent_run_id=run.run_id, root_run_id=run.run_id
            )
            lifecycle: list[Callable[[], None]] = [
                lambda run=run: marker.report_run_failed(run),
                lambda run=run: instance.add_run_tags(run.run_id, {WILL_RETRY_TAG: "true"}),
                lambda retry=retry: instance.add_run(retry),
                lambda run=run, retry=retry: instance.add_run_tags(
                    run.run_id, {AUTO_RETRY_RUN_ID_TAG: retry.run_id}
                ),
            ]
            writes: dict[int, list[Callable[[], None]]] = {}
            for write, after_read in zip(lifecycle, placement, strict=True):
                if after_read == 0:
                    write()
                else:
                    writes.setdefault(after_read, []).append(write)
            reading = Interleaved(instance, writes)
            pending = pending_pipelines(cast(dg.DagsterInstance, reading), {pipeline})
            assert pending.get(pipeline) in (run.run_id, retry.run_id), (placement, pending)
        assert len(placements) == 70


def test_a_lost_window_is_repaired_from_the_sensors_own_tick_and_never_twice(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    """The tick that sees the loss requests the repair (no checks run, no queue to wait
    behind); the rebuild sensor's later request for the same loss, read from a checks run
    made before the repair, then starts no Spark."""
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    incremental_job = defs.resolve_job_def("incremental_job")
    bronze, silver = lake / "bronze" / "orders", lake / "silver" / "orders"
    bronze_batch(defs, "orders", instance, 10)  # version 1
    assert incremental_job.execute_in_process(instance=instance).success
    bronze_batch(defs, "orders", instance, 10)
    bronze_batch(defs, "orders", instance, 10)
    vacuum_breaking_the_window(spark, str(bronze))

    (request,) = tick(defs, instance).run_requests
    assert request.run_key.startswith("repair:orders:1:")
    repaired = incremental_job.execute_in_process(
        instance=instance, asset_selection=request.asset_selection, tags=request.tags
    )
    figures = materialization(repaired, silver_key("orders"))
    assert (figures["mode"], figures["incident_code"]) == ("rebuild", "WATERMARK_OUTSIDE_RETENTION")
    assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze))
    assert not tick(defs, instance).run_requests

    # The rebuild sensor's request for the loss at watermark 1: repaired already, a no-op.
    late = defs.resolve_job_def("rebuild_job").execute_in_process(
        instance=instance,
        run_config=rebuild_run_config("orders", repair_of=1),
        asset_selection=[silver_key("orders")],
    )
    figures = materialization(late, silver_key("orders"))
    assert (figures["mode"], figures["spark_started"]) == ("noop", False)


def test_platform_jobs_carry_their_queue(spark_resource: SparkResource, lake: Path) -> None:
    """The runs that write silver wait in the `silver` queue and checks_job in its own, which
    the deployment's instance (deploy/dagster.yaml) gives a slot silver runs cannot take."""
    defs = lake_defs(spark_resource, lake, ORDERS)
    queues = {
        name: defs.resolve_job_def(name).tags.get(QUEUE_TAG)
        for name in ("incremental_job", "rebuild_job", "checks_job")
    }
    assert queues == {"incremental_job": "silver", "rebuild_job": "silver", "checks_job": "checks"}
