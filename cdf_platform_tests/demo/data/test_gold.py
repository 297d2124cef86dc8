"""gold/customer_order_totals follows silver orders through silver's own change feed, loaded by
the watermark IO manager: a full first load, then applied deltas that match a recomputation
exactly, a no-op without Spark, and a recompute when silver's feed range is gone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.core.sql import sql_path
from cdf_platform.demo.data.gold_asset import CUSTOMER_ORDER_TOTALS_KEY
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.state.consumer_marks import read_consumer_marks
from cdf_platform_tests.bronze import set_deleted_file_retention, vacuum_retain_zero
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
CHAIN = (BRONZE_ORDERS, SILVER_ORDERS, CUSTOMER_ORDER_TOTALS_KEY)
BATCH = {"ops": {"bronze__orders": {"config": {"batch_size": 60}}}}
SILVER_MODE = f"{SILVER_ORDERS.to_user_string()} mode"


def _watermark(gold: str) -> int | None:
    """Gold's watermark on silver/orders, from its own log."""
    marks = read_consumer_marks(gold, CUSTOMER_ORDER_TOTALS_KEY.to_user_string())
    return None if marks is None else marks.version_of(SILVER_ORDERS.to_user_string())


def _last_commit(path: str) -> tuple[int, str, dict[str, Any]]:
    """The table's latest version, its operation and operation metrics (read without a JVM)."""
    from deltalake import DeltaTable

    table = DeltaTable(path)
    (entry,) = table.history(1)
    return int(table.version()), entry["operation"], entry.get("operationMetrics") or {}


def _merged(metrics: dict[str, Any], name: str) -> int:
    return int(metrics.get(f"numTargetRows{name}", 0))


def test_gold_follows_soft_deleting_silver_incrementally_through_its_change_feed(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, {**ORDERS, "delete_mode": "soft"})
    instance = dg.DagsterInstance.ephemeral()
    silver, gold = str(lake / "silver" / "orders"), str(lake / "gold" / "customer_order_totals")

    first = materialization(
        materialize(defs, *CHAIN, instance=instance, run_config=BATCH), CUSTOMER_ORDER_TOTALS_KEY
    )
    silver_version = first["end_version"]
    assert (first["mode"], first["watermark_before"], first["start_version"]) == (
        "full",
        None,
        None,
    )
    assert (first[SILVER_MODE], first["written"], first["write"]) == (
        "full",
        True,
        "full replacement",
    )
    assert (first["reason"], first["incident_code"]) == ("first read of this input", None)
    assert first["path"] == gold
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    _, operation, metrics = _last_commit(gold)
    assert (operation, int(metrics["numOutputRows"])) == (
        "WRITE",
        len(expected_totals(spark, silver)),
    )
    assert _watermark(gold) == silver_version

    # Updates move orders between customers; soft deletes flip silver rows to _is_deleted.
    second = materialization(
        materialize(defs, *CHAIN, instance=instance, run_config=BATCH), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert (second["mode"], second[SILVER_MODE], second["write"]) == (
        "incremental",
        "incremental",
        "merge on customer_id",
    )
    assert (second["watermark_before"], second["start_version"], second["end_version"]) == (
        silver_version,
        silver_version + 1,
        silver_version + 1,
    )
    assert spark.sql(f"SELECT * FROM {sql_path(silver)} WHERE _is_deleted").count() == 6
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    _, operation, metrics = _last_commit(gold)
    assert operation == "MERGE"
    # Deltas were applied to existing customers, new ones inserted, and customers whose last
    # live order went (soft-deleted or moved away) left the table.
    assert all(_merged(metrics, name) > 0 for name in ("Inserted", "Updated", "Deleted"))
    assert _watermark(gold) == silver_version + 1

    jobs_before = last_spark_job_id(spark)
    version_before, _, _ = _last_commit(gold)
    idle = materialization(
        materialize(defs, CUSTOMER_ORDER_TOTALS_KEY, instance=instance), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert (idle["mode"], idle["written"], idle["end_version"]) == (
        "nothing_new",
        False,
        silver_version + 1,
    )
    assert last_spark_job_id(spark) == jobs_before
    assert _last_commit(gold)[0] == version_before


def test_gold_reads_an_scd2_silver_feed_counting_current_versions_only(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, {**ORDERS, "history": "scd2"})
    instance = dg.DagsterInstance.ephemeral()
    bronze, silver = str(lake / "bronze" / "orders"), str(lake / "silver" / "orders")
    gold = str(lake / "gold" / "customer_order_totals")

    first = materialization(
        materialize(defs, *CHAIN, instance=instance, run_config=BATCH), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert first["mode"] == "full"
    assert table_rows(spark, gold) == expected_totals(spark, bronze)
    # Updates close versions and open new ones, deletes close them: silver keeps them all,
    # gold counts the current ones, as bronze holds them.
    second = materialization(
        materialize(defs, *CHAIN, instance=instance, run_config=BATCH), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert second["mode"] == "incremental"
    closed = spark.sql(f"SELECT * FROM {sql_path(silver)} WHERE __end_at IS NOT NULL").count()
    assert closed > 0
    assert table_rows(spark, gold) == expected_totals(spark, bronze)


def test_gold_recomputes_when_silvers_feed_range_is_gone_then_applies_deltas_again(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    silver, gold = str(lake / "silver" / "orders"), str(lake / "gold" / "customer_order_totals")
    first = materialization(
        materialize(defs, *CHAIN, instance=instance, run_config=BATCH), CUSTOMER_ORDER_TOTALS_KEY
    )

    # Gold pauses while silver moves on; then silver's change files are vacuumed.
    silver_only = (BRONZE_ORDERS, SILVER_ORDERS)
    assert materialize(defs, *silver_only, instance=instance, run_config=BATCH).success
    set_deleted_file_retention(spark, silver, "interval 0 hours")
    vacuum_retain_zero(spark, silver)
    recomputed = materialization(
        materialize(defs, CUSTOMER_ORDER_TOTALS_KEY, instance=instance), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert (recomputed["mode"], recomputed["watermark_before"]) == ("full", first["end_version"])
    assert recomputed["incident_code"] == "WATERMARK_OUTSIDE_RETENTION"
    assert recomputed["write"] == "full replacement"
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    assert _watermark(gold) == recomputed["end_version"]

    # A rerun with nothing new leaves the totals exact; deltas apply again once silver keeps
    # its change files.
    rerun = materialization(
        materialize(defs, CUSTOMER_ORDER_TOTALS_KEY, instance=instance), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert (rerun["mode"], rerun["written"]) == ("nothing_new", False)
    assert table_rows(spark, gold) == expected_totals(spark, silver)
    set_deleted_file_retention(spark, silver, "interval 7 days")
    resumed = materialization(
        materialize(defs, *CHAIN, instance=instance, run_config=BATCH), CUSTOMER_ORDER_TOTALS_KEY
    )
    assert (resumed["mode"], resumed["start_version"]) == (
        "incremental",
        recomputed["end_version"] + 1,
    )
    assert table_rows(spark, gold) == expected_totals(spark, silver)
