"""Snapshot rebuild: reconcile silver with the bronze snapshot at a pinned version V and stamp the
watermark V in the same commit.

V is pinned first (from bronze's log), then `versionAsOf V` is read: commits landing while the
rebuild runs are left for the next incremental run, never lost. The reconcile is a MERGE, not an
overwrite, so silver's own change feed shows only the real differences.

Example:
    >>> outcome = rebuild_silver(spark, spec, version=190, silver=state, run_id="...")
    ... # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cdf_platform.core.faults import FaultPoint, fault_point
from cdf_platform.core.spec import HistoryMode, PipelineSpec
from cdf_platform.spark.changes import ReadContext, classified, project_columns
from cdf_platform.spark.conform import conform_snapshot
from cdf_platform.spark.history import merge_history, staged_reconcile
from cdf_platform.spark.merge import (
    TxnStamp,
    check_snapshot_keys,
    load_snapshot,
    reconcile_snapshot,
)
from cdf_platform.spark.sequenced_history import (
    merge_sequenced_history,
    staged_sequenced_reconcile,
)
from cdf_platform.spark.silver_layout import SilverLayout
from cdf_platform.spark.silver_table import ensure_silver, holds_files
from cdf_platform.state.watermark import SilverState, app_id, user_metadata

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class RebuildOutcome:
    """What a rebuild wrote: the version V, the generation, and the txn app id used."""

    version: int
    generation: int
    app_id: str
    columns: list[str]


def rebuild_generation(silver: SilverState, version: int, *, source_reset: bool) -> int:
    """The generation a rebuild to `version` must write under.

    Delta skips a write whose txnVersion is not above the stored one, so a rebuild that does not
    move the watermark forward (a reset source, or a rebuild at the current watermark) opens a
    new generation; the watermark is then exactly `version` under the new app id.
    """
    if silver.watermark is None:
        return silver.generation
    if source_reset or version <= silver.watermark:
        return silver.generation + 1
    return silver.generation


def rebuild_silver(
    spark: SparkSession,
    spec: PipelineSpec,
    *,
    version: int,
    silver: SilverState,
    run_id: str,
    mode: str,
    source_table_id: str | None,
    source_reset: bool = False,
    version_timestamp: datetime | None = None,
) -> RebuildOutcome:
    """Reconcile silver with bronze `versionAsOf version`; stamp watermark `version` atomically.

    Raises:
        InvalidPipelineSpec: the spec's transforms are refused (`cdf_platform.spark.conform`).
        DataQualityError: the snapshot has a null or duplicated key, or a NULL sequence value.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: the snapshot cannot be read.
        TargetOwnershipConflict, IncompatibleSchemaChange: silver cannot take the snapshot.
    """
    ctx = ReadContext(spec.id, spec.source, version, version)
    raw = classified(
        ctx,
        lambda: spark.read.format("delta").option("versionAsOf", version).load(spec.source),
    )
    conformed = conform_snapshot(spark, raw, spec, version=version, timestamp=version_timestamp)
    snapshot = project_columns(conformed, spec)
    layout = SilverLayout.of(spec, snapshot.schema)
    classified(
        ctx,
        lambda: check_snapshot_keys(
            snapshot,
            spec.keys,
            pipeline_id=spec.id,
            table=spec.source,
            version=version,
            sequence_by=spec.sequence_by,
        ),
    )
    layout = ensure_silver(spark, spec.target, spec.id, snapshot.schema, layout)
    fault_point(FaultPoint.DURING_REBUILD)
    generation = rebuild_generation(silver, version, source_reset=source_reset)
    txn_app_id = app_id(spec.id, generation)
    stamp = TxnStamp(
        app_id=txn_app_id,
        version=version,
        metadata=user_metadata(
            pipeline_id=spec.id,
            run_id=run_id,
            mode=mode,
            start_version=None,
            end_version=version,
            source_table_id=source_table_id,
            generation=generation,
        ),
    )
    deleted_at = version_timestamp or datetime.now(UTC)
    if layout.sequenced_history:
        staged = staged_sequenced_reconcile(
            spark, spec.target, snapshot, layout, version, generation
        )
        classified(ctx, lambda: merge_sequenced_history(spark, spec.target, staged, layout, stamp))
    elif layout.history is HistoryMode.SCD2:
        staged = staged_reconcile(spark, spec.target, snapshot, layout, version, deleted_at)
        classified(ctx, lambda: merge_history(spark, spec.target, staged, layout, stamp))
    elif not holds_files(spec.target):
        # Nothing to reconcile with: an append, sorted by key (file statistics by key range).
        classified(ctx, lambda: load_snapshot(spark, spec.target, snapshot, layout, stamp))
    else:
        classified(
            ctx,
            lambda: reconcile_snapshot(spark, spec.target, snapshot, layout, stamp, deleted_at),
        )
    return RebuildOutcome(version, generation, txn_app_id, layout.data_columns)
