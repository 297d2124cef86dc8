"""The incremental sensor requests a silver run when bronze has versions after the watermark,
once per pipeline and bronze version, and waits for bronze tables that do not exist yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.orchestration.keys import silver_key
from cdf_platform.orchestration.resources import SparkResource
from cdf_platform_tests.lake_platform import (
    bronze_batch,
    lake_defs,
    materialization,
    table_rows,
)


def tick(defs: dg.Definitions) -> Any:
    """One evaluation of the real incremental sensor."""
    sensor = defs.resolve_sensor_def("incremental_sensor")
    resources = {key: (defs.resources or {})[key] for key in sensor.required_resource_keys}
    with dg.build_sensor_context(definitions=defs, resources=resources) as context:
        return sensor(context)


def test_new_bronze_versions_request_one_silver_run_per_pipeline_and_version(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake)  # orders and customers
    instance = dg.DagsterInstance.ephemeral()
    nothing = tick(defs)
    assert not nothing.run_requests
    assert "orders (SOURCE_MISSING), customers (SOURCE_MISSING)" in str(nothing.skip_reason)

    bronze_batch(defs, "orders", instance, 10)  # version 1
    (request,) = tick(defs).run_requests
    assert request.run_key == "incremental:orders:1"
    assert request.asset_selection == [silver_key("orders")]
    assert request.tags == {"cdf_platform/pipeline_id": "orders"}

    run = defs.resolve_job_def("incremental_job").execute_in_process(
        instance=instance, asset_selection=request.asset_selection, tags=request.tags
    )
    assert materialization(run, silver_key("orders"))["mode"] == "initial_load"
    bronze, silver = lake / "bronze" / "orders", lake / "silver" / "orders"
    assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze))

    caught_up = tick(defs)
    assert not caught_up.run_requests
    assert str(caught_up.skip_reason.skip_message) == (
        "every silver table is up to date; not run here: customers (SOURCE_MISSING)"
    )
