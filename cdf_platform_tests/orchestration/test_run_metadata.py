"""The watermark IO manager pins `(watermark, latest]` from the logs alone (no Spark job), per
pipeline, and refuses an input that does not name its pipeline."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.orchestration.spark_resource import SparkResource
from cdf_platform.orchestration.watermark_io import PIPELINE_ID_METADATA, WatermarkIOManager
from cdf_platform.planning.plan import RunMode
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    control_for,
    lake_defs,
    last_spark_job_id,
)


def test_load_input_pins_each_pipelines_change_set_from_the_logs_without_spark(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    # Two pipelines read bronze/orders; each input is planned against its own watermark.
    audit = {**ORDERS, "id": "orders_audit", "target": "silver/orders_audit"}
    defs = lake_defs(spark_resource, lake, ORDERS, audit)
    bronze_batch(defs, "orders", dg.DagsterInstance.ephemeral(), 10)  # version 1
    io_manager = WatermarkIOManager(control_table=control_for(lake, ORDERS, audit))

    spark_jobs = last_spark_job_id(spark)
    pinned = {
        pipeline_id: io_manager.load_input(
            dg.build_input_context(
                name="changes",
                asset_key=dg.AssetKey(["bronze", "orders"]),
                definition_metadata={PIPELINE_ID_METADATA: pipeline_id},
            )
        )
        for pipeline_id in ("orders", "orders_audit")
    }
    assert last_spark_job_id(spark) == spark_jobs

    for pipeline_id, changes in pinned.items():
        plan = changes.plan
        assert plan.spec.id == pipeline_id
        assert plan.spec.target == str(lake / "silver" / pipeline_id)
        assert (plan.mode, plan.watermark, plan.end_version) == (RunMode.INITIAL_LOAD, None, 1)
        assert plan.problem is None
        assert changes.describe() == f"{pipeline_id}: initial_load, bronze snapshot at version 1"
        assert 0.0 < changes.plan_seconds < 5.0


def test_an_input_without_its_pipeline_id_is_refused(lake: Path) -> None:
    io_manager = WatermarkIOManager(control_table=control_for(lake, ORDERS))
    with pytest.raises(dg.Failure, match="cdf_platform/pipeline_id"):
        io_manager.load_input(dg.build_input_context(name="changes"))
