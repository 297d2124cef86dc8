"""gold/customer_order_totals follows silver orders through silver's own change feed: a full
first load, then increments that match a recomputation exactly, then a no-op without Spark."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.core.sql import sql_path
from cdf_platform.demo.gold import CONSUMER_ID
from cdf_platform.demo.gold_asset import CUSTOMER_ORDER_TOTALS_KEY
from cdf_platform.demo.silver_feed import consumer_watermark
from cdf_platform.orchestration.keys import silver_key
from cdf_platform.orchestration.resources import SparkResource
from cdf_platform_tests.lake_platform import (
    ORDERS,
    expected_totals,
    lake_defs,
    last_spark_job_id,
    materialization,
    materialize,
    table_rows,
)

BRONZE_ORDERS = dg.AssetKey(["bronze", "orders"])
SILVER_ORDERS = silver_key("orders")


def test_gold_follows_soft_deleting_silver_incrementally_through_its_change_feed(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, {**ORDERS, "delete_mode": "soft"})
    instance = dg.DagsterInstance.ephemeral()
    silver, gold = str(lake / "silver" / "orders"), str(lake / "gold" / "customer_order_totals")

    chain = (BRONZE_ORDERS, SILVER_ORDERS, CUSTOMER_ORDER_TOTALS_KEY)
    batch = {"ops": {"bronze__orders": {"config": {"batch_size": 60}}}}

    first = materialize(defs, *chain, instance=instance, run_config=batch)
    full = materialization(first, CUSTOMER_ORDER_TOTALS_KEY)
    silver_version = full["end_version"]
    assert (full["mode"], full["watermark_before"], full["spark_started"]) == ("full", None, True)
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    assert full["rows_written"] == len(expected_totals(spark, silver))
    assert consumer_watermark(gold, CONSUMER_ID) == silver_version

    # Updates move orders between customers; soft deletes flip silver rows to _is_deleted.
    second = materialize(defs, *chain, instance=instance, run_config=batch)
    incremental = materialization(second, CUSTOMER_ORDER_TOTALS_KEY)
    assert incremental["mode"] == "incremental"
    assert (incremental["start_version"], incremental["end_version"]) == (
        silver_version + 1,
        silver_version + 1,
    )
    assert incremental["rows_written"] > 0
    assert spark.sql(f"SELECT * FROM {sql_path(silver)} WHERE _is_deleted").count() == 6
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    assert consumer_watermark(gold, CONSUMER_ID) == silver_version + 1

    jobs_before = last_spark_job_id(spark)
    idle = materialization(
        materialize(defs, CUSTOMER_ORDER_TOTALS_KEY, instance=instance), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert (idle["mode"], idle["spark_started"], idle["rows_written"]) == ("noop", False, 0)
    assert last_spark_job_id(spark) == jobs_before


def test_gold_reads_an_scd2_silver_feed_counting_current_versions_only(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, {**ORDERS, "history": "scd2"})
    instance = dg.DagsterInstance.ephemeral()
    bronze, silver = str(lake / "bronze" / "orders"), str(lake / "silver" / "orders")
    gold = str(lake / "gold" / "customer_order_totals")
    chain = (BRONZE_ORDERS, SILVER_ORDERS, CUSTOMER_ORDER_TOTALS_KEY)
    batch = {"ops": {"bronze__orders": {"config": {"batch_size": 60}}}}

    first = materialization(
        materialize(defs, *chain, instance=instance, run_config=batch), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert first["mode"] == "full"
    assert table_rows(spark, gold) == expected_totals(spark, bronze)
    # Updates close versions and open new ones, deletes close them: silver keeps them all,
    # gold counts the current ones, as bronze holds them.
    second = materialization(
        materialize(defs, *chain, instance=instance, run_config=batch), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert second["mode"] == "incremental"
    closed = spark.sql(f"SELECT * FROM {sql_path(silver)} WHERE __end_at IS NOT NULL").count()
    assert closed > 0
    assert table_rows(spark, gold) == expected_totals(spark, bronze)
