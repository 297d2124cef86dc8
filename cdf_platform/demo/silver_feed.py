"""Planning one read of a silver table's change feed by a downstream (gold) consumer.

A consumer keeps its watermark the way silver does (docs/design.md section 3): as a Delta
idempotent-write transaction (`txnAppId` = consumer id, `txnVersion` = last silver version
applied) in the same commit as its data, so the consumer's own log is the truth. Planning reads
only logs: silver's replay window and the consumer's transaction version.

Example:
    >>> plan = plan_feed("/lake/silver/orders", "/lake/gold/totals", "gold_totals")
    ... # doctest: +SKIP
    >>> plan.mode, plan.start_version, plan.end_version  # doctest: +SKIP
    (<FeedMode.INCREMENTAL: 'incremental'>, 8, 9)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from cdf_platform.core.errors import SourceReset
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.window.replay_window import compute_replay_window


class FeedMode(StrEnum):
    """What a consumer run does."""

    NOOP = "noop"
    """Nothing after the watermark: Spark is not started."""
    INCREMENTAL = "incremental"
    """Apply silver's change feed for (watermark, end]."""
    FULL = "full"
    """Recompute from silver's snapshot at `end` (first run, or the feed range is gone)."""


@dataclass(frozen=True)
class FeedPlan:
    """One consumer run, decided from the logs.

    Attributes:
        consumer_id: the consumer's txn app id.
        source: the silver table read.
        target: the consumer's own table.
        mode: what the run does.
        watermark: the last silver version applied (None: never ran).
        end_version: silver's latest version, pinned.
        reason: why a FULL run is needed.
    """

    consumer_id: str
    source: str
    target: str
    mode: FeedMode
    watermark: int | None
    end_version: int
    reason: str | None = None

    @property
    def start_version(self) -> int | None:
        """First silver version an incremental run reads."""
        if self.mode is not FeedMode.INCREMENTAL or self.watermark is None:
            return None
        return self.watermark + 1


def consumer_watermark(target: str, consumer_id: str) -> int | None:
    """The last silver version `consumer_id` applied to `target` (JVM-free; None: never)."""
    if not is_delta_table(target):
        return None
    from deltalake import DeltaTable

    version = DeltaTable(target).transaction_version(consumer_id)
    return None if version is None else int(version)


def plan_feed(
    source: str, target: str, consumer_id: str, *, now: datetime | None = None
) -> FeedPlan:
    """Decide the next run of `consumer_id` reading `source`'s change feed into `target`.

    Raises:
        SourceNotFound: `source` is not a Delta table.
        SourceReset: `source`'s latest version is below the consumer's watermark (recreated).
    """
    window = compute_replay_window(source, now=now)
    latest = window.latest_version
    watermark = consumer_watermark(target, consumer_id)

    def plan(mode: FeedMode, reason: str | None = None) -> FeedPlan:
        return FeedPlan(consumer_id, source, target, mode, watermark, latest, reason)

    if watermark is None:
        return plan(FeedMode.FULL, "first run")
    if watermark > latest:
        raise SourceReset(
            f"{source} is at version {latest}, below the consumer's watermark {watermark}",
            pipeline_id=consumer_id,
            table=source,
            version=watermark,
            action=f"delete {target} so the consumer recomputes from the new table",
        )
    if watermark == latest:
        return plan(FeedMode.NOOP)
    found = window.break_for(watermark + 1)
    if found is not None:
        return plan(
            FeedMode.FULL,
            f"change feed from version {watermark + 1} can no longer be read ({found.detail})",
        )
    return plan(FeedMode.INCREMENTAL)
