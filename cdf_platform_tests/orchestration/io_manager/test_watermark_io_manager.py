"""The watermark IO manager through real `dg.materialize` runs on real Delta tables, with the
repository's example assets: consumers of one table keep their own watermarks, a consumer of
two tables records both in the commit of its data, nothing new starts no Spark and commits
nothing, a merged delta matches the NULL key and deletes the rows it empties, a lost input
window fails fast or hands a full batch per policy, and a run killed between compute and write
reruns exactly.

Run as a module (`python -m ... <lake>`), it materializes the revenue consumer once: the
killed-run test starts it in a process that dies before the write.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import dagster as dg
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.core.faults import FAULT_ENV, FAULT_EXIT_CODE, FaultPoint
from cdf_platform.core.sql import sql_path
from cdf_platform.orchestration.io_manager.watermark_io_manager import (
    RESOURCE_KEY,
    WatermarkIOManager,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.spark.read.batch import ChangeBatch, MergeRows, ReplaceRows, TableWrite
from cdf_platform.state.consumer_marks import read_consumer_marks
from cdf_platform_tests.bronze import set_deleted_file_retention, vacuum_retain_zero

# The repository's examples (examples/incremental_assets.py): a hand-written silver and a gold
# aggregate that applies deltas, both over silver/orders.
_EXAMPLES_FILE = Path(__file__).resolve().parents[3] / "examples" / "incremental_assets.py"
_SPEC = importlib.util.spec_from_file_location("incremental_assets", _EXAMPLES_FILE)
assert _SPEC is not None and _SPEC.loader is not None
EXAMPLES = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(EXAMPLES)

ORDERS = dg.AssetKey(["silver", "orders"])
CUSTOMERS = dg.AssetKey(["silver", "customers"])
REVENUE = dg.AssetKey(["gold", "revenue_by_customer"])
COPY = dg.AssetKey(["gold", "orders_copy"])
BY_REGION = dg.AssetKey(["gold", "by_region"])
ORDER_COUNTS = dg.AssetKey(["gold", "order_counts"])


def _table(lake: Path, key: dg.AssetKey) -> str:
    return str(lake.joinpath(*key.path))


def _upstream(lake: Path, key: dg.AssetKey, keys: str) -> dg.AssetSpec:
    metadata = {"path": dg.MetadataValue.path(_table(lake, key)), "keys": keys}
    return dg.AssetSpec(key, metadata=metadata).with_io_manager_key(RESOURCE_KEY)


@dg.asset(
    key=BY_REGION,
    io_manager_key=RESOURCE_KEY,
    ins={"orders": dg.AssetIn(ORDERS), "customers": dg.AssetIn(CUSTOMERS)},
)
def by_region(orders: ChangeBatch, customers: ChangeBatch) -> TableWrite | None:
    """Revenue per region from two inputs, recomputed from both pinned snapshots."""
    if orders.nothing_new and customers.nothing_new:
        return None
    joined = orders.snapshot().join(customers.snapshot(), "customer_id")
    return ReplaceRows(joined.groupBy("region").agg(F.sum("amount").alias("revenue")))


@dg.asset(key=ORDER_COUNTS, io_manager_key=RESOURCE_KEY, ins={"orders": dg.AssetIn(ORDERS)})
def order_counts(orders: ChangeBatch) -> TableWrite | None:
    """Orders per customer (NULL: orders without one), kept by applying each batch's delta; a
    customer whose orders are all gone leaves the table."""
    if orders.nothing_new:
        return None
    if orders.full:
        counts = orders.snapshot().groupBy("customer_id").agg(F.count(F.lit(1)).alias("orders"))
        return ReplaceRows(counts)
    sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), 1).otherwise(-1)
    delta = orders.raw_changes().groupBy("customer_id").agg(F.sum(sign).alias("orders"))
    return MergeRows(
        delta,
        keys=["customer_id"],
        update={"orders": "t.orders + s.orders"},
        delete_matched_when="t.orders + s.orders = 0",
    )


def _defs_assets(lake: Path) -> list[Any]:
    return [
        _upstream(lake, ORDERS, "order_id"),
        _upstream(lake, CUSTOMERS, "customer_id"),
        *EXAMPLES.ASSETS,
        by_region,
        order_counts,
    ]


def _resources(spark_resource: SparkResource, lake: Path, **fields: Any) -> dict[str, Any]:
    layout = LakeLayout(lake_root=str(lake))
    return {RESOURCE_KEY: WatermarkIOManager(spark=spark_resource, lake=layout, **fields)}


def _run(
    lake: Path, resources: dict[str, Any], key: dg.AssetKey, instance: dg.DagsterInstance
) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        _defs_assets(lake), selection=[key], resources=resources, instance=instance
    )


def _rows(spark: SparkSession, path: str, *order: str) -> list[tuple[Any, ...]]:
    frame = spark.read.format("delta").load(path)
    return sorted(tuple(r) for r in frame.select(*(order or frame.columns)).collect())


def _make_tables(spark: SparkSession, lake: Path) -> tuple[str, str]:
    orders, customers = _table(lake, ORDERS), _table(lake, CUSTOMERS)
    cdf = "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    spark.sql(
        f"CREATE TABLE {sql_path(orders)} (order_id BIGINT, customer_id BIGINT, amount BIGINT) "
        f"USING DELTA {cdf}"
    )
    spark.sql(f"INSERT INTO {sql_path(orders)} VALUES (1, 10, 100), (2, 10, 50), (3, 20, 70)")
    spark.sql(
        f"CREATE TABLE {sql_path(customers)} (customer_id BIGINT, region STRING) USING DELTA {cdf}"
    )
    spark.sql(f"INSERT INTO {sql_path(customers)} VALUES (10, 'north'), (20, 'south')")
    return orders, customers


def _revenue(spark: SparkSession, orders: str) -> list[tuple[Any, ...]]:
    """The revenue example's table recomputed from `orders`: (customer, orders, revenue)."""
    frame = spark.read.format("delta").load(orders).groupBy("customer_id")
    return sorted(tuple(r) for r in frame.agg(F.count("*"), F.sum("amount")).collect())


def _table_version(path: str) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(path).version())


def test_consumers_keep_their_own_watermarks_and_two_inputs_are_recorded_together(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    orders, customers = _make_tables(spark, lake)
    resources = _resources(spark_resource, lake)
    instance = dg.DagsterInstance.ephemeral()
    for key in (REVENUE, COPY, BY_REGION):
        assert _run(lake, resources, key, instance).success
    sql = [
        "UPDATE {t} SET amount = 120 WHERE order_id = 1",
        "DELETE FROM {t} WHERE order_id = 2",
        "INSERT INTO {t} VALUES (4, 20, 30)",
        "UPDATE {t} SET customer_id = 10 WHERE order_id = 3",  # moves revenue to 10
    ]
    for statement in sql[:2]:
        spark.sql(statement.format(t=sql_path(orders)))
    assert _run(lake, resources, REVENUE, instance).success  # orders 2..3
    for statement in sql[2:]:
        spark.sql(statement.format(t=sql_path(orders)))
    assert _run(lake, resources, REVENUE, instance).success  # orders 4..5
    assert _run(lake, resources, COPY, instance).success  # orders 2..5 at once

    assert _rows(spark, _table(lake, REVENUE)) == _revenue(spark, orders)
    assert _rows(spark, _table(lake, COPY), "order_id", "customer_id", "amount") == _rows(
        spark, orders
    )
    revenue_marks = read_consumer_marks(_table(lake, REVENUE), "gold/revenue_by_customer")
    copy_marks = read_consumer_marks(_table(lake, COPY), "gold/orders_copy")
    assert revenue_marks is not None and copy_marks is not None
    assert (revenue_marks.counter, revenue_marks.version_of("silver/orders")) == (3, 5)
    assert (copy_marks.counter, copy_marks.version_of("silver/orders")) == (2, 5)

    # Two inputs: both pinned versions ride in the one commit of the data.
    spark.sql(f"UPDATE {sql_path(customers)} SET region = 'east' WHERE customer_id = 20")
    result = _run(lake, resources, BY_REGION, instance)
    assert result.success
    marks = read_consumer_marks(_table(lake, BY_REGION), "gold/by_region")
    assert marks is not None and marks.commit_version == _table_version(_table(lake, BY_REGION))
    assert {k: m.version for k, m in marks.inputs.items()} == {
        "silver/orders": 5,
        "silver/customers": 2,
    }
    assert _rows(spark, _table(lake, BY_REGION)) == [("east", 30), ("north", 190)]

    # A delete that empties a customer (its only order, 4) takes its row away, as a recompute
    # has none: not a row of 0 orders and 0 revenue.
    spark.sql(f"DELETE FROM {sql_path(orders)} WHERE order_id = 4")
    assert _run(lake, resources, REVENUE, instance).success  # orders 6
    assert _rows(spark, _table(lake, REVENUE)) == _revenue(spark, orders) == [(10, 2, 190)]


def test_nothing_new_starts_no_spark_and_commits_nothing(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    _make_tables(spark, lake)
    instance = dg.DagsterInstance.ephemeral()
    assert _run(lake, _resources(spark_resource, lake), REVENUE, instance).success
    before = _table_version(_table(lake, REVENUE))
    # A Spark resource that could not start: the no-op run must never ask it for a session.
    unstartable = SparkResource(master="spark://127.0.0.1:9", app_name="never_started")
    result = _run(lake, _resources(unstartable, lake), REVENUE, instance)
    assert result.success
    assert not unstartable.started
    assert _table_version(_table(lake, REVENUE)) == before
    (materialization,) = result.asset_materializations_for_node("gold__revenue_by_customer")
    assert materialization.metadata["written"].value is False


def test_an_unknown_fallback_mode_is_refused_before_anything_is_read(lake: Path) -> None:
    @dg.asset(
        key=dg.AssetKey(["gold", "misconfigured"]),
        io_manager_key=RESOURCE_KEY,
        ins={"orders": dg.AssetIn(ORDERS, metadata={"fallback_mode": "SOMETIMES"})},
    )
    def misconfigured(orders: ChangeBatch) -> TableWrite | None:
        return None

    unstartable = SparkResource(master="spark://127.0.0.1:9", app_name="never_started")
    result = dg.materialize(
        [_upstream(lake, ORDERS, "order_id"), misconfigured],
        selection=[misconfigured.key],
        resources=_resources(unstartable, lake),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    failure = result.failure_data_for_node("gold__misconfigured")
    assert failure is not None
    message = str(failure.error)
    assert "InvalidPipelineSpec" in message and "'SOMETIMES'" in message
    assert "SNAPSHOT_REBUILD" in message  # what to set instead
    assert not unstartable.started and not Path(_table(lake, ORDERS)).exists()


def test_a_lost_input_window_fails_fast_or_hands_a_full_batch(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    orders, _ = _make_tables(spark, lake)
    instance = dg.DagsterInstance.ephemeral()
    fail_fast = _resources(spark_resource, lake, fallback_mode="FAIL_FAST")
    rebuild = _resources(spark_resource, lake)
    assert _run(lake, fail_fast, COPY, instance).success
    assert _run(lake, rebuild, REVENUE, instance).success
    spark.sql(f"UPDATE {sql_path(orders)} SET amount = amount + 1 WHERE order_id = 1")
    spark.sql(f"DELETE FROM {sql_path(orders)} WHERE order_id = 3")
    set_deleted_file_retention(spark, orders, "interval 0 hours")
    vacuum_retain_zero(spark, orders)

    failed = dg.materialize(
        _defs_assets(lake),
        selection=[COPY],
        resources=fail_fast,
        instance=instance,
        raise_on_error=False,
    )
    assert not failed.success
    failure = failed.failure_data_for_node("gold__orders_copy")
    assert failure is not None and "ReplayWindowLost" in str(failure.error)
    # The remedy is the consumer's recompute, not a silver rebuild (Dagster shortens the
    # middle of a long message; its end names the input, where a silver rebuild names bronze).
    assert failure.error.message.rstrip().endswith(
        "raise delta.deletedFileRetentionDuration on the input above the consumer's longest pause."
    )
    kept = read_consumer_marks(_table(lake, COPY), "gold/orders_copy")
    assert kept is not None and kept.version_of("silver/orders") == 1

    # SNAPSHOT_REBUILD: a full batch, the table replaced from the pinned snapshot.
    assert _run(lake, rebuild, REVENUE, instance).success
    assert _rows(spark, _table(lake, REVENUE)) == _revenue(spark, orders)
    marks = read_consumer_marks(_table(lake, REVENUE), "gold/revenue_by_customer")
    assert marks is not None and marks.version_of("silver/orders") == _table_version(orders)


def test_a_merged_delta_matches_the_null_key_and_deletes_the_rows_it_empties(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    orders, _ = _make_tables(spark, lake)
    spark.sql(f"INSERT INTO {sql_path(orders)} VALUES (4, NULL, 5)")
    resources = _resources(spark_resource, lake)
    instance = dg.DagsterInstance.ephemeral()
    assert _run(lake, resources, ORDER_COUNTS, instance).success  # full: 10: 2, 20: 1, NULL: 1
    spark.sql(f"DELETE FROM {sql_path(orders)} WHERE customer_id = 20")
    spark.sql(f"INSERT INTO {sql_path(orders)} VALUES (5, NULL, 7)")
    assert _run(lake, resources, ORDER_COUNTS, instance).success  # a merge of the deltas

    counts = spark.read.format("delta").load(_table(lake, ORDER_COUNTS)).collect()
    # One NULL row, updated in place (not a second one inserted); customer 20 gone.
    assert Counter(tuple(row) for row in counts) == Counter({(10, 2): 1, (None, 2): 1})


def test_a_run_killed_between_compute_and_write_reruns_exactly(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    orders, _ = _make_tables(spark, lake)
    instance = dg.DagsterInstance.ephemeral()
    resources = _resources(spark_resource, lake)
    assert _run(lake, resources, REVENUE, instance).success
    spark.sql(f"UPDATE {sql_path(orders)} SET amount = 1 WHERE order_id = 2")
    before = _table_version(_table(lake, REVENUE))
    killed = subprocess.run(
        [sys.executable, "-m", __name__, str(lake)],
        env={**os.environ, FAULT_ENV: FaultPoint.BEFORE_CONSUMER_WRITE.value},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr[-3000:]
    assert _table_version(_table(lake, REVENUE)) == before
    assert _run(lake, resources, REVENUE, instance).success
    assert _rows(spark, _table(lake, REVENUE)) == _revenue(spark, orders)


def _materialize_revenue_once(lake: Path) -> None:
    resource = SparkResource(master="local[1]", app_name="killed_consumer", shuffle_partitions=1)
    result = _run(lake, _resources(resource, lake), REVENUE, dg.DagsterInstance.ephemeral())
    sys.exit(0 if result.success else 1)


if __name__ == "__main__":
    _materialize_revenue_once(Path(sys.argv[1]))
