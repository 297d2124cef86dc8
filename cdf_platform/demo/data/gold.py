"""Customer order totals: live orders and revenue per customer, maintained incrementally from
silver orders' own change feed.

Each run applies only what changed in silver since the consumer's watermark: every change row
adds (insert, update_postimage) or subtracts (delete, update_preimage) its order from its
customer's totals; soft-deleted rows count as gone. An SCD2 silver (`history: scd2`) is read the
same way: only its current versions (`__end_at` NULL) count, so closing a version (an update
whose postimage has `__end_at`) subtracts it and opening one (an insert) adds it. A customer
whose last live order goes leaves the table. A full batch (the first run, or one whose range of
silver's feed is gone) recomputes from the pinned silver snapshot instead.

The watermark IO manager (`cdf_platform.orchestration.io_manager.watermark_io_manager`) pins the
batch, and commits what this returns with silver's version in the same commit, so a rerun after a
crash applies nothing twice.

Example:
    >>> write = customer_order_totals(orders)  # orders: a ChangeBatch of silver orders
    ... # doctest: +SKIP
    >>> write.keys, write.update  # doctest: +SKIP
    (('customer_id',), {'order_count': 't.order_count + s.order_count', ...})
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cdf_platform.spark.read.batch import ChangeBatch, MergeRows, ReplaceRows, TableWrite
from cdf_platform.spark.read.change_feed import CHANGE_TYPE
from cdf_platform.spark.table.silver_layout import END_AT, IS_DELETED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

CUSTOMER = "customer_id"
AMOUNT = "amount"
ORDER_COUNT = "order_count"
TOTAL_AMOUNT = "total_amount"
AMOUNT_TYPE = "decimal(22,2)"
_ADDS = ("insert", "update_postimage")
_SUBTRACTS = ("delete", "update_preimage")


def _live(frame: DataFrame) -> Column:
    """An order that counts: not soft-deleted, and (SCD2 silver) its current version."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    live = F.lit(True)
    if IS_DELETED in frame.columns:
        live = live & ~F.coalesce(F.col(IS_DELETED), F.lit(False))
    if END_AT in frame.columns:
        live = live & F.col(END_AT).isNull()
    return live


def snapshot_totals(orders: DataFrame) -> DataFrame:
    """Totals over the live orders of a silver snapshot."""
    from pyspark.sql import functions as F  # noqa: N812

    return (
        orders.filter(_live(orders))
        .groupBy(CUSTOMER)
        .agg(
            F.count(F.lit(1)).alias(ORDER_COUNT),
            F.sum(AMOUNT).cast(AMOUNT_TYPE).alias(TOTAL_AMOUNT),
        )
    )


def change_deltas(changes: DataFrame) -> DataFrame:
    """Per customer, the change in live order count and amount that silver's change feed rows
    `changes` (pre- and post-images) make (customers with no net change left out)."""
    from pyspark.sql import functions as F  # noqa: N812

    sign = (
        F.when(F.col(CHANGE_TYPE).isin(*_ADDS), F.lit(1))
        .when(F.col(CHANGE_TYPE).isin(*_SUBTRACTS), F.lit(-1))
        .otherwise(F.lit(0))
    )
    weight = F.when(_live(changes), sign).otherwise(F.lit(0))
    return (
        changes.groupBy(CUSTOMER)
        .agg(
            F.sum(weight).alias(ORDER_COUNT),
            F.sum(weight * F.col(AMOUNT)).cast(AMOUNT_TYPE).alias(TOTAL_AMOUNT),
        )
        .filter((F.col(ORDER_COUNT) != 0) | (F.col(TOTAL_AMOUNT) != 0))
    )


def customer_order_totals(orders: ChangeBatch) -> TableWrite | None:
    """What one batch of silver orders does to the totals: nothing (nothing new), a recompute
    from the pinned snapshot (a full batch), or each changed customer's delta added to its row,
    a row whose orders are all gone deleted."""
    if orders.nothing_new:
        return None
    if orders.full:
        return ReplaceRows(snapshot_totals(orders.snapshot()))
    return MergeRows(
        change_deltas(orders.raw_changes()),
        keys=(CUSTOMER,),
        update={
            ORDER_COUNT: f"t.{ORDER_COUNT} + s.{ORDER_COUNT}",
            TOTAL_AMOUNT: f"t.{TOTAL_AMOUNT} + s.{TOTAL_AMOUNT}",
        },
        delete_matched_when=f"t.{ORDER_COUNT} + s.{ORDER_COUNT} = 0",
    )
