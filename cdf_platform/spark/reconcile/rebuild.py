"""Snapshot rebuild: reconcile silver with the bronze snapshot at a pinned version V and stamp the
watermark V in the same commit.

V is pinned first (from bronze's log), then `versionAsOf V` is read: commits landing while the
rebuild runs are left for the next incremental run, never lost. The reconcile is a MERGE, not an
overwrite, so silver's own change feed shows only the real differences.

Example:
    >>> request = RebuildRequest(190, state, run_id="r1", mode="rebuild", source_table_id="t-1")
    ... # doctest: +SKIP
    >>> outcome = rebuild_silver(spark, spec, request)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cdf_platform.core.faults import FaultPoint, fault_point
from cdf_platform.core.spec.expectations import ExpectationCounts
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.storage import StorageConfig
from cdf_platform.spark.quality.conform import conform_snapshot
from cdf_platform.spark.quality.expectation_judging import judged_columns
from cdf_platform.spark.quality.quality_gate import Judgement, QualityGate
from cdf_platform.spark.read.change_feed import ReadContext, classified, project_columns
from cdf_platform.spark.table.silver_layout import SilverLayout
from cdf_platform.spark.table.silver_table import (
    check_silver_owner,
    ensure_silver,
    set_deletion_vectors,
)
from cdf_platform.spark.write.merge import check_snapshot_keys
from cdf_platform.spark.write.silver_writer import SilverWriter, silver_stamp
from cdf_platform.state.watermark import SilverState, spec_metadata


@dataclass(frozen=True)
class SpecRewrite:
    """How a rebuild follows an edited spec (docs/design.md section 3a).

    Attributes:
        record: The current spec's row-shaping fields, recorded with the watermark.
        reshape: Rewrite silver in the new shape (keys, delete mode, or history to SCD1) instead
            of reconciling it: its rows are replaced in one commit, never merged on other keys.
        exact: Reconcile to the snapshot's values as they are (`ignore_null_updates` or
            `sequence_by` changed: silver may hold values those rules kept).
        deletion_vectors: Set silver's deletion-vector property to this (`deletion_vectors`
            changed), or None.
    """

    record: dict[str, str] | None = None
    reshape: bool = False
    exact: bool = False
    deletion_vectors: bool | None = None


if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class RebuildOutcome:
    """What a rebuild wrote: the version V, the generation, the txn app id used, silver's data
    columns, and what the load log should say of it (an event log's keys left as they were)."""

    version: int
    generation: int
    app_id: str
    columns: list[str]
    note: str | None = None
    counts: ExpectationCounts | None = None


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


@dataclass(frozen=True)
class RebuildRequest:
    """What a rebuild writes: silver reconciled with bronze at `version`, under `silver`'s
    state, stamped with `run_id` and `mode`.

    Attributes:
        version: The pinned bronze version V.
        silver: Silver's state before the rebuild (watermark, generation).
        run_id: The run's id, stamped in the commit.
        mode: The run's mode as the load log names it.
        source_table_id: Bronze's table id.
        storage: The lake's object-store options (silver's log is read with them).
        source_reset: Bronze was reset (a new generation is opened).
        version_timestamp: V's commit time (dates soft deletes and closed versions).
        rewrite: How the rebuild follows an edited spec.
        gate: The pipeline's expectations and quarantine (`WriteStrategy.reconcile` sets it).
    """

    version: int
    silver: SilverState
    run_id: str
    mode: str
    source_table_id: str | None
    storage: StorageConfig
    source_reset: bool = False
    version_timestamp: datetime | None = None
    rewrite: SpecRewrite = SpecRewrite()
    gate: QualityGate | None = None

    @property
    def generation(self) -> int:
        """The source generation the rebuild writes under (`rebuild_generation`)."""
        return rebuild_generation(self.silver, self.version, source_reset=self.source_reset)

    @property
    def deleted_at(self) -> datetime:
        """When a row the rebuild deletes (or closes) left bronze: V's commit time (now when
        unknown)."""
        return self.version_timestamp or datetime.now(UTC)

    def writer(
        self, spark: SparkSession, pipeline_id: str, target: str, layout: SilverLayout
    ) -> SilverWriter:
        """Silver's writer for this rebuild: its generation, and the stamp of watermark V."""
        stamp = silver_stamp(
            pipeline_id,
            generation=self.generation,
            run_id=self.run_id,
            mode=self.mode,
            start_version=None,
            end_version=self.version,
            source_table_id=self.source_table_id,
            **spec_metadata(self.rewrite.record),
        )
        return SilverWriter(spark, target, layout, stamp, self.generation, self.storage)

    def quality_gate(self, spec: PipelineSpec) -> QualityGate:
        """The gate the rebuild's rows pass (one without a quarantine table when none was
        set: it refuses to hold rows)."""
        return self.gate or QualityGate(spec, None, self.storage)

    def outcome(
        self,
        writer: SilverWriter,
        note: str | None = None,
        counts: ExpectationCounts | None = None,
    ) -> RebuildOutcome:
        """What the rebuild through `writer` wrote."""
        columns = writer.layout.data_columns
        return RebuildOutcome(
            self.version, writer.generation, writer.stamp.app_id, columns, note, counts
        )


def read_pinned(
    spark: SparkSession, spec: PipelineSpec, version: int
) -> tuple[ReadContext, DataFrame]:
    """Bronze `versionAsOf version` for a rebuild, and the context its failures are classified
    in.

    Raises:
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: the snapshot cannot be read.
    """
    ctx = ReadContext.at_version(
        spec.id,
        spec.source,
        version,
        # A rebuild is the remedy of a lost window: when its own read fails, rebuilding again
        # helps only from a newer version.
        action="rerun: the rebuild pins bronze's latest version again; if that read fails the "
        "same way, files of bronze's current version are missing: restore them (or recreate "
        "bronze) first",
    )
    raw = classified(
        ctx,
        lambda: spark.read.format("delta").option("versionAsOf", version).load(spec.source),
    )
    return ctx, raw


def pinned_snapshot(
    spark: SparkSession,
    spec: PipelineSpec,
    version: int,
    timestamp: datetime | None,
    *,
    judged: bool = False,
) -> tuple[ReadContext, DataFrame]:
    """The rows silver should hold after a rebuild at bronze `version` (committed at
    `timestamp`): bronze `versionAsOf version` after the spec's transform, columns and filter
    (`conform_snapshot`), projected to silver's data columns; and the context its failures are
    classified in. What the rebuild reconciles silver with, and what `verify` compares silver
    with (`cdf_platform.spark.reconcile.silver_comparison`), so the two never disagree on what the
    spec means.
    `judged`: the rows the expectations keep out are still there, each with its `FAILED_RULES`
    (the rebuild's quality gate keeps them out, counts them and holds the quarantined ones).

    Raises:
        InvalidPipelineSpec: the spec's transforms are refused
            (`cdf_platform.spark.quality.conform`).
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: the snapshot cannot be read.
    """
    ctx, raw = read_pinned(spark, spec, version)
    conformed = conform_snapshot(
        spark, raw, spec, version=version, timestamp=timestamp, judged=judged
    )
    return ctx, project_columns(conformed, spec, judged_columns(conformed))


def prepare_silver(
    spark: SparkSession,
    spec: PipelineSpec,
    schema: StructType,
    rewrite: SpecRewrite,
    storage: StorageConfig,
) -> SilverLayout:
    """Silver ready for a rebuild of rows of `schema`: its owner checked when the rebuild
    replaces it in a new shape, else created or evolved (`ensure_silver`); its deletion-vector
    property set when the spec changed it. Returns silver's layout. `storage`: the lake's
    object-store options.

    Raises:
        TargetOwnershipConflict, IncompatibleSchemaChange: silver cannot take the rows.
    """
    layout = SilverLayout.of(spec, schema)
    if rewrite.reshape:
        # The whole table is replaced, schema included: only its owner is checked.
        check_silver_owner(spec.target, spec.id, storage)
    else:
        layout = ensure_silver(spark, spec.target, spec.id, schema, layout, storage=storage)
    if rewrite.deletion_vectors is not None:
        set_deletion_vectors(spark, spec.target, enabled=rewrite.deletion_vectors, storage=storage)
    return layout


def rebuild_silver(
    spark: SparkSession, spec: PipelineSpec, request: RebuildRequest
) -> RebuildOutcome:
    """Reconcile silver with bronze `versionAsOf request.version`; stamp that watermark
    atomically.

    The request's `rewrite` says how silver follows an edited spec (reshape it, or reconcile
    exactly); its record is stamped with the watermark, so silver then records the spec it was
    built under.

    Raises:
        InvalidPipelineSpec: the spec's transforms are refused
            (`cdf_platform.spark.quality.conform`).
        DataQualityError: the snapshot has a null or duplicated key, or a NULL sequence value.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: the snapshot cannot be read.
        TargetOwnershipConflict, IncompatibleSchemaChange: silver cannot take the snapshot.
    """
    version = request.version
    ctx, judged = pinned_snapshot(spark, spec, version, request.version_timestamp, judged=True)
    gate = request.quality_gate(spec)
    judgement = classified(ctx, lambda: gate.screen_snapshot(judged, version=version))
    try:
        writer = _reconcile(spark, spec, request, ctx, judgement)
    finally:
        judgement.release()
    return request.outcome(writer, counts=judgement.counts)


def _reconcile(
    spark: SparkSession,
    spec: PipelineSpec,
    request: RebuildRequest,
    ctx: ReadContext,
    judgement: Judgement,
) -> SilverWriter:
    """Silver reconciled with the judged snapshot's rows, its quarantine written first."""
    version, snapshot = request.version, judgement.rows
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
    rewrite = request.rewrite
    layout = prepare_silver(spark, spec, snapshot.schema, rewrite, request.storage)
    classified(
        ctx, lambda: request.quality_gate(spec).hold(spark, judgement, run_id=request.run_id)
    )
    fault_point(FaultPoint.DURING_REBUILD)
    writer = request.writer(spark, spec.id, spec.target, layout)
    deleted_at = request.deleted_at
    reshape, exact = rewrite.reshape, rewrite.exact
    classified(
        ctx,
        lambda: writer.reconcile(snapshot, deleted_at=deleted_at, reshape=reshape, exact=exact),
        f"reconciling silver {spec.target} with {ctx.described}",
    )
    return writer
