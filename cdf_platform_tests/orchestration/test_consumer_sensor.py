"""Consumers are automated like silver: when a consumer's input commits, `consumer_sensor`
requests one `consumer_job` run of it, named by the input's version (no second run for one
version, none while one is pending), and the run reads exactly what changed: gold equals its
recompute from silver after every run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.demo.data.gold_asset import CUSTOMER_ORDER_TOTALS_KEY
from cdf_platform.orchestration.sensors.consumer_sensor import CONSUMER_JOB, CONSUMER_SENSOR
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    expected_totals,
    lake_defs,
    materialization,
    sensor_tick,
    table_rows,
)

GOLD = "gold/customer_order_totals"


def tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> Any:
    """One evaluation of the real consumer sensor against `instance`."""
    return sensor_tick(defs, instance, CONSUMER_SENSOR)


def test_an_input_commit_materializes_the_consumer_once_exactly(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    silver = str(lake / "silver" / "orders")
    gold = str(lake / "gold" / "customer_order_totals")
    job = defs.resolve_job_def(CONSUMER_JOB)
    instance = dg.DagsterInstance.ephemeral()
    bronze_batch(defs, "orders", instance, 30)
    incremental = defs.resolve_job_def("incremental_job")
    assert incremental.execute_in_process(instance=instance).success  # silver version 1

    (first,) = tick(defs, instance).run_requests  # never read: its first (full) run
    assert first.run_key == f"consume:{GOLD}:silver/orders@1"
    assert first.asset_selection == [CUSTOMER_ORDER_TOTALS_KEY]
    # Requested again before its run exists: the same run key, which Dagster runs once.
    (again,) = tick(defs, instance).run_requests
    assert again.run_key == first.run_key

    # While its run is pending, nothing more is requested.
    queued = instance.create_run_for_job(
        job, asset_selection=frozenset(first.asset_selection or []), tags=dict(job.tags)
    )
    held = tick(defs, instance)
    assert not held.run_requests
    assert f"{GOLD} (run pending)" in str(held.skip_reason)
    instance.report_run_canceled(queued)

    ran = job.execute_in_process(instance=instance, asset_selection=first.asset_selection)
    assert materialization(ran, CUSTOMER_ORDER_TOTALS_KEY)["mode"] == "full"
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    assert not tick(defs, instance).run_requests  # caught up

    # The input commits: one run for the new version, reading only that change.
    bronze_batch(defs, "orders", instance, 30)
    assert incremental.execute_in_process(instance=instance).success  # silver version 2
    (second,) = tick(defs, instance).run_requests
    assert second.run_key == f"consume:{GOLD}:silver/orders@2"
    ran = job.execute_in_process(instance=instance, asset_selection=second.asset_selection)
    figures = materialization(ran, CUSTOMER_ORDER_TOTALS_KEY)
    assert (figures["mode"], figures["start_version"], figures["end_version"]) == (
        "incremental",
        2,
        2,
    )
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    assert not tick(defs, instance).run_requests
