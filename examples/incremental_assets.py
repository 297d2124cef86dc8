"""Two hand-written incremental assets on the watermark IO manager, over `silver/orders`.

- `gold/orders_copy`: a silver-like copy written in Python, the latest change per order merged
  (deletes applied).
- `gold/revenue_by_customer`: revenue per customer, kept by applying each batch's delta (a
  moved or deleted order subtracts from its old customer), never recomputed unless the batch is
  full (first run, or the input's replay window was lost).

Each reads only what changed in silver since its own last write, and its table's commit records
the silver version it read up to (docs/incremental-assets.md). Give them to the
platform's definitions, which add their lag and replay-window checks, repair and VACUUM guard:

    defs = cdf.build_defs(consumers=ASSETS)

`cdf_platform_tests/orchestration/io_manager/test_watermark_io_manager.py` materializes both.
"""

import dagster as dg
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

import cdf_platform as cdf

ORDERS = {"orders": dg.AssetIn(["silver", "orders"])}
# Money in exact decimals: a delta that cancels out sums to exactly 0.
MONEY = "decimal(22,2)"


@dg.asset(key_prefix="gold", io_manager_key="watermark_io_manager", ins=ORDERS)
def orders_copy(orders: cdf.ChangeBatch) -> cdf.TableWrite | None:
    """Every live order, as silver holds it: the latest change per order merged."""
    if orders.nothing_new:
        return None
    if orders.full:
        return cdf.ReplaceRows(orders.snapshot())
    return cdf.MergeRows(
        orders.changes(), keys=["order_id"], delete_when="s._change_type = 'delete'"
    )


@dg.asset(key_prefix="gold", io_manager_key="watermark_io_manager", ins=ORDERS)
def revenue_by_customer(orders: cdf.ChangeBatch) -> cdf.TableWrite | None:
    """Live orders and revenue per customer, kept by applying each batch's delta."""
    if orders.nothing_new:  # no Spark, no commit: the watermark stays
        return None
    if orders.full:  # first run, or the input's window was lost: recompute
        totals = (
            orders.snapshot()
            .groupBy("customer_id")
            .agg(F.count("*").alias("orders"), F.sum("amount").cast(MONEY).alias("revenue"))
        )
        return cdf.ReplaceRows(totals)
    # A post-image adds its order to its customer, a pre-image or a delete takes it away.
    sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), 1).otherwise(-1)
    delta = (
        orders.raw_changes()
        .groupBy("customer_id")
        .agg(
            F.sum(sign).alias("orders"), F.sum(sign * F.col("amount")).cast(MONEY).alias("revenue")
        )
        .filter("orders != 0 OR revenue != 0")  # customers the batch left as they were
    )
    return cdf.MergeRows(
        delta,
        keys=["customer_id"],
        update={"orders": "t.orders + s.orders", "revenue": "t.revenue + s.revenue"},
        delete_matched_when="t.orders + s.orders = 0",  # its last order went: the row goes
    )


ASSETS = [orders_copy, revenue_by_customer]
