"""Silver assets through real `dg.materialize` runs: initial load, incremental MERGE, and a no-op
that never starts Spark, each with its metadata; and silver fed by an external bronze table."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.orchestration.keys import silver_key
from cdf_platform.orchestration.resources import SparkResource
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    lake_defs,
    last_spark_job_id,
    materialization,
    materialize,
    table_rows,
)

SILVER_ORDERS = silver_key("orders")


def test_bronze_then_silver_twice_loads_then_merges_then_noops_without_spark(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze, silver = str(lake / "bronze" / "orders"), str(lake / "silver" / "orders")

    assert bronze_batch(defs, "orders", instance, 40)["version"] == 1
    first = materialization(materialize(defs, SILVER_ORDERS, instance=instance), SILVER_ORDERS)
    assert (first["mode"], first["start_version"], first["end_version"]) == (
        "initial_load",
        "none",
        1,
    )
    assert (first["rows_inserted"], first["rows_updated"], first["rows_deleted"]) == (40, 0, 0)
    assert (first["watermark_before"], first["watermark_after"]) == ("none", 1)
    assert (first["version_lag_before"], first["version_lag_after"]) == (2, 0)
    assert first["lag_hours_after"] == 0.0
    assert first["spark_started"] is True
    assert first["incident_code"] == "none"
    assert first["path"] == silver
    assert table_rows(spark, silver) == table_rows(spark, bronze)

    # Version 2: 24 updates, 12 inserts, 4 deletes in one bronze commit.
    batch = bronze_batch(defs, "orders", instance, 40)
    assert (batch["rows_updated"], batch["rows_inserted"], batch["rows_deleted"]) == (24, 12, 4)
    second = materialization(materialize(defs, SILVER_ORDERS, instance=instance), SILVER_ORDERS)
    assert (second["mode"], second["start_version"], second["end_version"]) == ("incremental", 2, 2)
    assert (second["rows_inserted"], second["rows_updated"], second["rows_deleted"]) == (12, 24, 4)
    assert (second["version_lag_before"], second["version_lag_after"]) == (1, 0)
    assert round(second["lag_hours_before"], 2) == second["lag_hours_before"]  # seconds: 0.0
    assert second["duration_seconds"] > 0.0
    assert table_rows(spark, silver) == table_rows(spark, bronze)
    by_version = table_rows(spark, silver, "_source_commit_version")
    assert (by_version.count((1,)), by_version.count((2,))) == (40 - 24 - 4, 24 + 12)

    # No bronze version after the watermark: a no-op that runs no Spark job at all.
    jobs_before = last_spark_job_id(spark)
    third = materialization(materialize(defs, SILVER_ORDERS, instance=instance), SILVER_ORDERS)
    assert (third["mode"], third["start_version"], third["end_version"]) == ("noop", "none", "none")
    assert (third["rows_inserted"], third["rows_updated"], third["rows_deleted"]) == (0, 0, 0)
    assert (third["watermark_before"], third["watermark_after"]) == (2, 2)
    assert third["spark_started"] is False
    assert last_spark_job_id(spark) == jobs_before
    assert table_rows(spark, silver) == table_rows(spark, bronze)
