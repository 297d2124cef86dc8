"""A silver run pins `(watermark, latest]` from the logs alone (no Spark job), per pipeline, and
records what it did as typed metadata (numbers stay numbers, absent figures are null)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.orchestration.keys import silver_key
from cdf_platform.orchestration.resources import SparkResource
from cdf_platform.orchestration.silver import describe_plan
from cdf_platform.planning.plan import RunMode, plan_pipeline
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
        assert describe_plan(plan) == f"{pipeline_id}: initial_load, bronze snapshot at version 1"


def test_a_silver_materialization_records_typed_figures(
    spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze_batch(defs, "orders", instance, 10)
    key = silver_key("orders")
    result = materialize(defs, key, instance=instance)
    (materialized,) = result.asset_materializations_for_node(key.to_python_identifier())
    metadata = materialized.metadata
    assert isinstance(metadata["end_version"], dg.IntMetadataValue)
    assert isinstance(metadata["rows_inserted"], dg.IntMetadataValue)
    assert isinstance(metadata["duration_seconds"], dg.FloatMetadataValue)
    assert isinstance(metadata["plan_seconds"], dg.FloatMetadataValue)
    assert isinstance(metadata["spark_started"], dg.BoolMetadataValue)
    assert isinstance(metadata["start_version"], dg.NullMetadataValue)  # an initial load
    assert isinstance(metadata["incident_code"], dg.NullMetadataValue)
    assert metadata["mode"].value == "initial_load"
    assert metadata["path"].value == str(lake / "silver" / "orders")
