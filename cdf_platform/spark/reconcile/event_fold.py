"""An event log's rebuild (`changes: events`): the fold of every event bronze still holds at a
pinned version, applied to silver as a run applies its changes (`fold_events`), and the same
fold as the rows silver should hold (`pinned_fold`, which `verify` compares silver with).

Example:
    >>> outcome = fold_events(spark, spec, request, tombstones)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import quote_ident
from cdf_platform.core.storage import StorageConfig
from cdf_platform.spark.quality.quality_gate import Judgement, QualityGate
from cdf_platform.spark.read.change_feed import (
    CHANGE_TYPE,
    FEED_COLUMNS,
    ReadContext,
    as_change_feed,
    classified,
)
from cdf_platform.spark.read.changes import ChangeOrder, CollapsedChanges, collapse_changes
from cdf_platform.spark.reconcile.event_source import Tombstones, event_change_rows
from cdf_platform.spark.reconcile.rebuild import (
    RebuildOutcome,
    RebuildRequest,
    prepare_silver,
    read_pinned,
)
from cdf_platform.spark.runtime.small_steps import interpreted
from cdf_platform.spark.table.silver_layout import END_AT, IS_DELETED, SilverLayout
from cdf_platform.spark.table.silver_table import holds_files
from cdf_platform.spark.write.merge import Truncation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class PinnedFold:
    """The events bronze holds at a pinned version, folded per key.

    Attributes:
        ctx: The context the read's failures are classified in.
        collapsed: The fold (each key's latest event; every commit's, for SCD2 with
            `every_commit`), cached: release it.
        truncation: The latest truncate among the events, if any.
        data_columns: Silver's data columns (the events' row images).
        images: The events' row images, as a frame of the data columns.
        judgement: What the quality gate made of the events (a rebuild's; None: the
            expectations' kept-out rows are dropped as `where` drops them, unjudged).
    """

    ctx: ReadContext
    collapsed: CollapsedChanges
    truncation: Truncation | None
    data_columns: list[str]
    images: DataFrame
    judgement: Judgement | None = None

    def release(self) -> None:
        """Drop the cached fold and judged events."""
        self.collapsed.release()
        if self.judgement is not None:
            self.judgement.release()


def pinned_fold(
    spark: SparkSession,
    spec: PipelineSpec,
    version: int,
    timestamp: datetime | None,
    *,
    latest_only: bool = False,
    gate: QualityGate | None = None,
) -> PinnedFold:
    """Fold the events bronze holds at `version` (committed at `timestamp`) as the spec orders
    them; `latest_only` keeps only each key's latest event, SCD2 too (what silver's open
    version of the key holds).

    Raises:
        InvalidPipelineSpec, DataQualityError: as an incremental run's.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: the snapshot cannot be read.
    """
    ctx, raw = read_pinned(spark, spec, version)
    feed = as_change_feed(raw, version, timestamp)
    changes, truncation = event_change_rows(spark, feed, spec, ctx, judged=gate is not None)
    judgement = None
    if gate is not None:
        judged = changes
        judgement = classified(
            ctx, lambda: gate.screen_changes(judged, version=version, whole=True)
        )
        changes = judgement.rows
    data_columns = [c for c in changes.columns if c not in FEED_COLUMNS]
    order = ChangeOrder.of(spec)
    if latest_only:
        order = replace(order, every_commit=False)
    with interpreted(spark):
        collapsed = collapse_changes(changes, spec.keys, data_columns, ctx, order)
    images = changes.select(*(quote_ident(c) for c in data_columns))
    return PinnedFold(ctx, collapsed, truncation, data_columns, images, judgement)


def fold_events(
    spark: SparkSession, spec: PipelineSpec, request: RebuildRequest, tombstones: Tombstones
) -> RebuildOutcome:
    """Rebuild silver of an event log from the events bronze still holds at `request.version`
    (`tombstones`: the pipeline's, `Tombstones.of`):
    their fold (latest event per key, or every event for SCD2) applied as a run applies its
    changes, silver's newer rows kept, what silver already holds rewritten nowhere, and the
    watermark `version` stamped in the same commit. A key silver holds that bronze holds no
    event of any more (its events removed by bronze's retention) is kept and named in the
    outcome's note, never deleted. A change of `keys`, `history` or `delete_mode` rewrites
    silver from the fold's live keys (those keys' rows are lost, and said so).

    Raises:
        InvalidPipelineSpec, DataQualityError: as an incremental run's.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: the snapshot cannot be read.
        TargetOwnershipConflict, IncompatibleSchemaChange: silver cannot take the events.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    gate = request.quality_gate(spec)
    fold = pinned_fold(spark, spec, request.version, request.version_timestamp, gate=gate)
    ctx, collapsed, truncation = fold.ctx, fold.collapsed, fold.truncation
    data_columns, judgement = fold.data_columns, fold.judgement
    try:
        if judgement is not None:
            held = judgement
            classified(ctx, lambda: gate.hold(spark, held, run_id=request.run_id))
        schema = fold.images.schema
        rewrite = request.rewrite
        layout = prepare_silver(spark, spec, schema, rewrite, request.storage)
        writer = request.writer(spark, spec.id, spec.target, layout)
        unheld = classified(
            ctx, lambda: _unheld_keys(spark, spec, layout, collapsed.frame, request.storage)
        )
        if rewrite.reshape:
            live = collapsed.frame.filter(F.col(CHANGE_TYPE) != "delete").select(
                *(quote_ident(c) for c in data_columns)
            )
            at = request.deleted_at
            classified(
                ctx, lambda: writer.reconcile(live, deleted_at=at, reshape=True, exact=False)
            )
        else:
            folded = collapsed
            classified(
                ctx,
                lambda: tombstones.apply(
                    spark, writer, folded, truncation, silver_filter=None, fold=True
                ),
            )
    finally:
        fold.release()
    return request.outcome(writer, unheld, judgement.counts if judgement else None)


def _unheld_keys(
    spark: SparkSession,
    spec: PipelineSpec,
    layout: SilverLayout,
    folded: DataFrame,
    storage: StorageConfig,
) -> str | None:
    """The load log's words on silver's current keys that the fold holds no event of (bronze's
    retention removed them): how many, and the first few. None when there is none (or no
    silver yet)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    if not holds_files(spec.target, storage):
        return None
    silver = spark.read.format("delta").load(spec.target)
    if END_AT in silver.columns:
        silver = silver.filter(F.col(END_AT).isNull())
    if IS_DELETED in silver.columns:
        silver = silver.filter(~F.col(IS_DELETED))
    keys = [quote_ident(k) for k in layout.keys]
    missing = silver.select(*keys).join(
        folded.select(*keys).distinct(), on=layout.keys, how="left_anti"
    )
    count = missing.count()
    if count == 0:
        return None
    shown = ", ".join(
        "(" + ", ".join(f"{k}={row[k]!r}" for k in layout.keys) + ")"
        for row in missing.orderBy(*keys).limit(3).collect()
    )
    return (
        f"{count} silver key(s) have no event left in bronze (removed by its retention), kept "
        f"as they were: {shown}{', ...' if count > 3 else ''}"
    )
