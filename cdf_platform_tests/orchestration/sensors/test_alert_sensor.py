"""The alert sensor over a real platform and a real Dagster instance: a window at risk, back,
at risk again, lost and repaired gives each receiver exactly one message per opening and end
(the lost window's end is its repair), and a refused destructive setting one message, in order,
with nothing repeated however often the checks
run or the sensor ticks, and nothing from before the sensor first ran; the sensor's state is
the instance's, so definitions loaded again (a restarted code server) carry on where it was.
The story runs on an in-memory instance; the events it reads are read from positions on the
run-sharded SQLite instance of `dagster dev` too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.demo.demo_definitions import build_demo_defs
from cdf_platform.orchestration.jobs.maintenance_jobs import (
    MAINTENANCE_JOB,
    maintenance_run_config,
)
from cdf_platform.orchestration.jobs.silver_jobs import CHECKS_JOB, REBUILD_JOB, rebuild_run_config
from cdf_platform.orchestration.sensors.alert_sensor import ALERT_SENSOR, EventReader
from cdf_platform.orchestration.shared.keys import INCIDENT_TAG, PIPELINE_TAG
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_testkit.lake import write_pipelines
from cdf_platform_testkit.receivers import HttpReceiver
from cdf_platform_testkit.sensors import sensor_tick
from cdf_platform_tests.lake_platform import ORDERS, bronze_batch, vacuum_breaking_the_window

# Any backlog is at risk: the headroom of a pipeline behind is the retention (7 days) at most.
AT_RISK_WHEN_BEHIND = {**ORDERS, "min_headroom_hours": 1000}


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[HttpReceiver]:
    with HttpReceiver(tmp_path) as receiver:
        yield receiver


def defs_for(lake: Path, spark_resource: SparkResource, webhook: HttpReceiver) -> dg.Definitions:
    """The demo's definitions on `lake`, its pipelines file with an `alerts:` section."""
    alerts = {
        "ui_url": "http://dagster.test",
        "targets": {"hook": {"webhook": {"url": f"{webhook.endpoint}/hook"}}},
    }
    file = write_pipelines(lake / "pipelines.yaml", [AT_RISK_WHEN_BEHIND], alerts=alerts)
    return build_demo_defs(
        LakeLayout(lake_root=str(lake), pipelines_file=str(file)), spark_resource
    )


def told(webhook: HttpReceiver) -> list[tuple[str, str]]:
    return [(r["body"]["event"], r["body"]["status"]) for r in webhook.received()]


def run(defs: dg.Definitions, job: str, instance: dg.DagsterInstance, **kwargs: Any) -> None:
    defs.resolve_job_def(job).execute_in_process(instance=instance, raise_on_error=False, **kwargs)


def test_each_incident_is_told_once_when_it_opens_and_once_when_it_ends(
    spark: SparkSession, spark_resource: SparkResource, lake: Path, webhook: HttpReceiver
) -> None:
    defs = defs_for(lake, spark_resource, webhook)
    with dg.DagsterInstance.ephemeral() as instance:
        bronze_batch(defs, "orders", instance, 20)  # before the sensor: never told
        run(defs, "incremental_job", instance)
        bronze_batch(defs, "orders", instance, 20)
        run(defs, CHECKS_JOB, instance)  # at risk, before the sensor's first tick
        sensor_tick(defs, instance, ALERT_SENSOR)
        assert told(webhook) == []

        run(defs, "incremental_job", instance)
        bronze_batch(defs, "orders", instance, 20)
        for _ in range(2):  # evaluated twice, told once
            run(defs, CHECKS_JOB, instance)
            sensor_tick(defs, instance, ALERT_SENSOR)
        assert told(webhook) == [("window_at_risk", "opened")]
        (risk,) = webhook.received()
        body = risk["body"]
        assert body["pipeline"] == "orders" and body["severity"] == "warning"
        assert body["url"] == "http://dagster.test/assets/silver/orders?view=checks"
        assert body["figures"]["watermark"] == 2 and "headroom_hours" in body["figures"]
        assert body["advice"].startswith("run orders now")

        run(defs, "incremental_job", instance)
        run(defs, CHECKS_JOB, instance)
        sensor_tick(defs, instance, ALERT_SENSOR)
        assert told(webhook)[1:] == [("window_at_risk", "resolved")]

        bronze_batch(defs, "orders", instance, 20)
        bronze_batch(defs, "orders", instance, 20)
        run(defs, CHECKS_JOB, instance)
        sensor_tick(defs, instance, ALERT_SENSOR)
        vacuum_breaking_the_window(spark, str(lake / "bronze" / "orders"))
        # Definitions loaded again (a code server restarted): the state is the instance's.
        defs = defs_for(lake, spark_resource, webhook)
        for _ in range(2):
            run(defs, CHECKS_JOB, instance)
            sensor_tick(defs, instance, ALERT_SENSOR)
        assert told(webhook)[2:] == [("window_at_risk", "opened"), ("window_lost", "opened")]

        run(
            defs,
            REBUILD_JOB,
            instance,
            run_config=rebuild_run_config("orders", repair_of=3),
            tags={INCIDENT_TAG: "WATERMARK_OUTSIDE_RETENTION", PIPELINE_TAG: "orders"},
        )
        run(defs, CHECKS_JOB, instance)
        sensor_tick(defs, instance, ALERT_SENSOR)
        sensor_tick(defs, instance, ALERT_SENSOR)
        assert told(webhook)[4:] == [("repair_started", "event"), ("window_lost", "resolved")]
        repaired = webhook.received()[-1]["body"]
        assert repaired["title"] == "[cdf_platform] RESOLVED orders: replay window repaired"
        assert "silver rebuilt from bronze version" in repaired["summary"]
        assert repaired["opened_at"] is not None
        assert repaired["url"].startswith("http://dagster.test/runs/")

        # A refused destructive setting is an event of its own, not a failed run.
        retain_zero = maintenance_run_config("bronze/orders", retain_zero=True)
        run(defs, MAINTENANCE_JOB, instance, run_config=retain_zero)
        sensor_tick(defs, instance, ALERT_SENSOR)
        assert told(webhook)[6:] == [("destructive_action", "event")]
        refused = webhook.received()[-1]["body"]
        assert refused["title"] == (
            "[cdf_platform] maintenance_job (bronze/orders): destructive action refused"
        )
        assert "DestructiveActionNotPermitted" in refused["summary"]


def test_the_reader_reads_asset_and_run_events_once_on_a_run_sharded_sqlite_instance() -> None:
    """On the instance `dagster dev` opens (SQLite, a database per run, asset events and run
    status changes copied to an index database, the only one read from a position), the reader
    reads each asset event and run status change after its start once, and nothing before it."""
    fail = False

    @dg.asset
    def table() -> Iterator[dg.AssetObservation | dg.Output[int]]:
        yield dg.AssetObservation(asset_key="table")
        if fail:
            raise RuntimeError("failed")
        yield dg.Output(1)

    def read(
        reader: EventReader, instance: dg.DagsterInstance, cursors: dict[str, Any]
    ) -> list[tuple[str, dg.DagsterEventType | None]]:
        return sorted(
            (seen.entry.run_id, seen.entry.dagster_event_type)
            for seen in reader.read(instance, cursors)
        )

    reader = EventReader([])
    with dg.instance_for_test() as instance:
        assert instance.event_log_storage.is_run_sharded
        dg.materialize([table], instance=instance)  # before the reader's start: never read
        cursors = reader.start(instance)
        assert read(reader, instance, cursors) == []
        done = dg.materialize([table], instance=instance).run_id
        fail = True
        failed = dg.materialize([table], instance=instance, raise_on_error=False).run_id
        assert read(reader, instance, cursors) == sorted(
            [
                (done, dg.DagsterEventType.RUN_START),
                (done, dg.DagsterEventType.ASSET_OBSERVATION),
                (done, dg.DagsterEventType.ASSET_MATERIALIZATION),
                (done, dg.DagsterEventType.RUN_SUCCESS),
                (failed, dg.DagsterEventType.RUN_START),
                (failed, dg.DagsterEventType.ASSET_OBSERVATION),
                (failed, dg.DagsterEventType.RUN_FAILURE),
            ]
        )
        assert read(reader, instance, cursors) == []
