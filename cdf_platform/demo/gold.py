"""Customer order totals: live orders and revenue per customer, maintained incrementally from
silver orders' own change feed.

Each run applies only what changed in silver since its watermark: every change row adds (insert,
update_postimage) or subtracts (delete, update_preimage) its order from its customer's totals;
soft-deleted rows count as gone. An SCD2 silver (`history: scd2`) is read the same way: only its
current versions (`__end_at` NULL) count, so closing a version (an update whose postimage has
`__end_at`) subtracts it and opening one (an insert) adds it. The MERGE carries the watermark as
a Delta transaction in the same commit, so a rerun after a crash applies nothing twice. The first
run, or one whose range of silver's feed is gone, recomputes from a pinned silver snapshot
instead.

Example:
    >>> outcome = refresh_customer_order_totals(
    ...     spark_factory=lambda: spark, silver="/lake/silver/orders",
    ...     target="/lake/gold/customer_order_totals")  # doctest: +SKIP
    >>> outcome.mode, outcome.end_version  # doctest: +SKIP
    (<FeedMode.INCREMENTAL: 'incremental'>, 9)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from cdf_platform.core.sql import sql_path
from cdf_platform.demo.silver_feed import FeedMode, FeedPlan, plan_feed
from cdf_platform.spark.changes import CHANGE_TYPE, ReadContext, classified, read_changes
from cdf_platform.spark.merge import TxnStamp, stamped
from cdf_platform.spark.session import new_session
from cdf_platform.spark.silver_layout import END_AT, IS_DELETED
from cdf_platform.state.watermark import user_metadata

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CONSUMER_ID = "gold_customer_order_totals"
CUSTOMER = "customer_id"
AMOUNT = "amount"
AMOUNT_TYPE = "decimal(22,2)"
_ADDS = ("insert", "update_postimage")
_SUBTRACTS = ("delete", "update_preimage")
_VIEW = "cdf_platform_gold_deltas"


@dataclass(frozen=True)
class RefreshOutcome:
    """What one refresh did, for metadata and logs."""

    mode: FeedMode
    watermark_before: int | None
    start_version: int | None
    end_version: int
    rows_written: int
    spark_started: bool
    duration_seconds: float
    reason: str | None


def _live(frame: DataFrame) -> Column:
    """An order that counts: not soft-deleted, and (SCD2 silver) its current version."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    live = F.lit(True)
    if IS_DELETED in frame.columns:
        live = live & ~F.coalesce(F.col(IS_DELETED), F.lit(False))
    if END_AT in frame.columns:
        live = live & F.col(END_AT).isNull()
    return live


def snapshot_totals(spark: SparkSession, silver: str, version: int) -> DataFrame:
    """Totals over the live orders of silver `versionAsOf version`."""
    from pyspark.sql import functions as F  # noqa: N812

    orders = spark.read.format("delta").option("versionAsOf", version).load(silver)
    return (
        orders.filter(_live(orders))
        .groupBy(CUSTOMER)
        .agg(
            F.count(F.lit(1)).alias("order_count"),
            F.sum(AMOUNT).cast(AMOUNT_TYPE).alias("total_amount"),
        )
    )


def change_deltas(spark: SparkSession, silver: str, start: int, end: int) -> DataFrame:
    """Per customer, the change in live order count and amount over silver versions
    [start, end] (customers with no net change left out)."""
    from pyspark.sql import functions as F  # noqa: N812

    changes = read_changes(spark, silver, start, end)
    sign = (
        F.when(F.col(CHANGE_TYPE).isin(*_ADDS), F.lit(1))
        .when(F.col(CHANGE_TYPE).isin(*_SUBTRACTS), F.lit(-1))
        .otherwise(F.lit(0))
    )
    weight = F.when(_live(changes), sign).otherwise(F.lit(0))
    return (
        changes.groupBy(CUSTOMER)
        .agg(
            F.sum(weight).alias("d_count"),
            F.sum(weight * F.col(AMOUNT)).cast(AMOUNT_TYPE).alias("d_amount"),
        )
        .filter((F.col("d_count") != 0) | (F.col("d_amount") != 0))
    )


def _rows_written(target: str) -> int:
    """Rows the consumer's last commit wrote (MERGE: inserted + updated + deleted), JVM-free."""
    from deltalake import DeltaTable

    (entry,) = DeltaTable(target).history(1)
    metrics = entry.get("operationMetrics") or {}
    if "numTargetRowsInserted" in metrics:
        merged = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")
        return sum(int(metrics.get(name, 0)) for name in merged)
    return int(metrics.get("numOutputRows", 0))


def _merge_sql(target: str) -> str:
    return f"""
        MERGE INTO {sql_path(target)} AS t USING {_VIEW} AS s
        ON t.`{CUSTOMER}` <=> s.`{CUSTOMER}`
        WHEN MATCHED AND t.order_count + s.d_count = 0 THEN DELETE
        WHEN MATCHED THEN UPDATE SET
            t.order_count = t.order_count + s.d_count,
            t.total_amount = t.total_amount + s.d_amount
        WHEN NOT MATCHED THEN INSERT (`{CUSTOMER}`, order_count, total_amount)
            VALUES (s.`{CUSTOMER}`, s.d_count, s.d_amount)
    """


def _apply(spark: SparkSession, plan: FeedPlan, stamp: TxnStamp) -> None:
    # Silver is read lazily, inside the write: its failures are classified there too.
    if plan.mode is FeedMode.FULL:
        ctx = ReadContext(plan.consumer_id, plan.source, plan.end_version, plan.end_version)
        totals = snapshot_totals(spark, plan.source, plan.end_version)
        writer = totals.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
        with stamped(spark, stamp):
            classified(ctx, lambda: writer.save(plan.target))
        return
    assert plan.start_version is not None
    ctx = ReadContext(plan.consumer_id, plan.source, plan.start_version, plan.end_version)
    deltas = change_deltas(spark, plan.source, plan.start_version, plan.end_version)
    deltas.createOrReplaceTempView(_VIEW)
    try:
        with stamped(spark, stamp):
            # Delta commits a MERGE even when its source is empty, so the watermark advances.
            classified(ctx, lambda: spark.sql(_merge_sql(plan.target)).collect())
    finally:
        spark.catalog.dropTempView(_VIEW)


def refresh_customer_order_totals(
    *,
    spark_factory: Callable[[], SparkSession],
    silver: str,
    target: str,
    now: datetime | None = None,
) -> RefreshOutcome:
    """Bring `target` up to silver's latest version; start Spark only if there is work.

    Raises:
        SourceNotFound: silver does not exist yet.
        SourceReset: silver was recreated below the watermark.
        ReplayWindowLost, UnknownReadFailure: the pinned change-feed read failed.
    """
    started = time.monotonic()
    plan = plan_feed(silver, target, CONSUMER_ID, now=now)

    def outcome(rows: int, spark_started: bool) -> RefreshOutcome:
        return RefreshOutcome(
            mode=plan.mode,
            watermark_before=plan.watermark,
            start_version=plan.start_version,
            end_version=plan.end_version,
            rows_written=rows,
            spark_started=spark_started,
            duration_seconds=time.monotonic() - started,
            reason=plan.reason,
        )

    if plan.mode is FeedMode.NOOP:
        return outcome(0, False)
    # A session of its own: the txn confs set around the write never leak to other work.
    spark = new_session(spark_factory())
    stamp = TxnStamp(
        app_id=CONSUMER_ID,
        version=plan.end_version,
        metadata=user_metadata(
            consumer_id=CONSUMER_ID,
            mode=plan.mode.value,
            start_version=plan.start_version,
            end_version=plan.end_version,
        ),
    )
    _apply(spark, plan, stamp)
    return outcome(_rows_written(plan.target), True)
