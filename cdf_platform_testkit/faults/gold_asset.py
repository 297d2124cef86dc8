"""`gold/totals_by_name`: the generated histories' gold consumer, an asset written as a Dagster
user writes one on the watermark IO manager (docs/incremental-assets.md).

Per `name` of silver's live rows: `people` (how many) and `amount_total` (the sum of their
non-NULL amounts), kept by applying deltas. Each incremental batch of silver's change feed adds
its inserts and post-images and subtracts its deletes and pre-images, a row counting only when
live (not soft-deleted; in SCD2 silver, the current version: closing a version subtracts it,
opening one adds it), merged with `t.people + s.people`, a name whose count reaches 0 deleted.
A full batch recomputes from the pinned snapshot.

No `from __future__ import annotations` here: Dagster checks the `context` annotation at
definition time and needs the class itself, not its name.

Example:
    >>> asset = totals_by_name_asset(dg.AssetKey(["silver", "fuzz_3"]))  # doctest: +SKIP
    >>> dg.materialize([silver_spec, asset], selection=[GOLD_KEY], resources=...)
    ... # doctest: +SKIP
"""

from typing import TYPE_CHECKING

import dagster as dg

from cdf_platform.orchestration.io_manager.watermark_io_manager import RESOURCE_KEY
from cdf_platform.spark.read.batch import ChangeBatch, MergeRows, ReplaceRows, TableWrite
from cdf_platform_testkit.faults.gold_oracle import AMOUNT, AMOUNT_TOTAL, GROUP, PEOPLE

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

GOLD_KEY = dg.AssetKey(["gold", "totals_by_name"])
_ADDS = ("insert", "update_postimage")
_SUBTRACTS = ("delete", "update_preimage")


def _live(frame: "DataFrame") -> "Column":
    """A silver row that counts: not soft-deleted and, in SCD2 silver, the current version."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    live = F.lit(True)
    if "_is_deleted" in frame.columns:
        live = live & ~F.coalesce(F.col("_is_deleted"), F.lit(False))
    if "__end_at" in frame.columns:
        live = live & F.col("__end_at").isNull()
    return live


def snapshot_totals(people: "DataFrame") -> "DataFrame":
    """Totals per name over the live rows of a silver snapshot."""
    from pyspark.sql import functions as F  # noqa: N812

    return (
        people.filter(_live(people))
        .groupBy(GROUP)
        .agg(
            F.count(F.lit(1)).cast("bigint").alias(PEOPLE),
            F.coalesce(F.sum(AMOUNT), F.lit(0)).cast("bigint").alias(AMOUNT_TOTAL),
        )
    )


def change_deltas(changes: "DataFrame") -> "DataFrame":
    """Per name, what silver's change feed rows `changes` (pre- and post-images) add to its
    totals (names with no net change left out)."""
    from pyspark.sql import functions as F  # noqa: N812

    sign = (
        F.when(F.col("_change_type").isin(*_ADDS), F.lit(1))
        .when(F.col("_change_type").isin(*_SUBTRACTS), F.lit(-1))
        .otherwise(F.lit(0))
    )
    weight = F.when(_live(changes), sign).otherwise(F.lit(0))
    amount = F.coalesce(F.col(AMOUNT), F.lit(0))
    return (
        changes.groupBy(GROUP)
        .agg(
            F.sum(weight).cast("bigint").alias(PEOPLE),
            F.sum(weight * amount).cast("bigint").alias(AMOUNT_TOTAL),
        )
        .filter((F.col(PEOPLE) != 0) | (F.col(AMOUNT_TOTAL) != 0))
    )


def totals_by_name_asset(silver: dg.AssetKey) -> dg.AssetsDefinition:
    """`gold/totals_by_name` over the silver asset `silver`."""

    @dg.asset(key=GOLD_KEY, io_manager_key=RESOURCE_KEY, ins={"people": dg.AssetIn(silver)})
    def totals_by_name(context: dg.AssetExecutionContext, people: ChangeBatch) -> TableWrite | None:
        """Live people and the sum of their amounts per name, kept by applying each batch's
        delta; recomputed from the snapshot on a full batch."""
        context.add_output_metadata({"mode": people.mode.value})
        if people.nothing_new:
            return None
        if people.full:
            return ReplaceRows(snapshot_totals(people.snapshot()))
        return MergeRows(
            change_deltas(people.raw_changes()),
            keys=[GROUP],
            update={
                PEOPLE: f"t.{PEOPLE} + s.{PEOPLE}",
                AMOUNT_TOTAL: f"t.{AMOUNT_TOTAL} + s.{AMOUNT_TOTAL}",
            },
            delete_matched_when=f"t.{PEOPLE} + s.{PEOPLE} = 0",
        )

    return totals_by_name
