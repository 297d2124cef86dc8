"""Two hand-written incremental assets on the watermark IO manager, over `silver/orders`.

- `gold/orders_copy`: a silver-like copy written in Python, the latest change per order merged
  (deletes applied).
- `gold/revenue_by_customer`: revenue per customer, kept by applying each batch's delta (a
  moved or deleted order subtracts from its old customer), never recomputed unless the batch is
  full (first run, or the input's replay window was lost).

Each reads only what changed in silver since its own last write, and its table's commit records
the silver version it read up to (README: Your own incremental asset). Give them to the
platform's definitions, which add their lag and replay-window checks, repair and VACUUM guard:

    defs = build_defs(consumers=ASSETS)

`cdf_platform_tests/orchestration/test_watermark_io_manager.py` materializes both.
"""

import dagster as dg
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.spark.change_batch import ChangeBatch, MergeRows, ReplaceRows, TableWrite

ORDERS = {"orders": dg.AssetIn(["silver", "orders"])}


@dg.asset(key_prefix="gold", io_manager_key="watermark_io_manager", ins=ORDERS)
def orders_copy(orders: ChangeBatch) -> TableWrite | None:
    """Every live order, as silver holds it: the latest change per order merged."""
    if orders.nothing_new:
        return None
    if orders.full:
        return ReplaceRows(orders.snapshot())
    return MergeRows(orders.changes(), keys=["order_id"], delete_when="s._change_type = 'delete'")


@dg.asset(key_prefix="gold", io_manager_key="watermark_io_manager", ins=ORDERS)
def revenue_by_customer(orders: ChangeBatch) -> TableWrite | None:
    """Revenue per customer (customer_id, revenue), kept by applying each batch's delta."""
    if orders.nothing_new:
        return None
    if orders.full:
        totals = orders.snapshot().groupBy("customer_id").agg(F.sum("amount").alias("revenue"))
        return ReplaceRows(totals)
    # A post-image adds its order to its customer, a pre-image or a delete takes it away.
    sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), 1).otherwise(-1)
    delta = (
        orders.raw_changes()
        .groupBy("customer_id")
        .agg(F.sum(sign * F.col("amount")).alias("revenue"))
    )
    return MergeRows(delta, keys=["customer_id"], update={"revenue": "t.revenue + s.revenue"})


ASSETS = [orders_copy, revenue_by_customer]
