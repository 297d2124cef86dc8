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
from cdf_platform.core.spec import PipelineSpec
from cdf_platform.spark.changes import ReadContext, classified, project_columns
from cdf_platform.spark.conform import conform_snapshot
from cdf_platform.spark.merge import check_snapshot_keys
from cdf_platform.spark.silver_layout import SilverLayout
from cdf_platform.spark.silver_table import (
    check_silver_owner,
    ensure_silver,
    set_deletion_vectors,
)
from cdf_platform.spark.silver_writer import SilverWriter, silver_stamp
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
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class RebuildOutcome:
    """What a rebuild wrote: the version V, the generation, the txn app id used, silver's data
    columns, and what the load log should say of it (an event log's keys left as they were)."""

    version: int
    generation: int
    app_id: str
    columns: list[str]
    note: str | None = None


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
    rewrite: SpecRewrite | None = None,
) -> RebuildOutcome:
    """Reconcile silver with bronze `versionAsOf version`; stamp watermark `version` atomically.

    `rewrite` says how silver follows an edited spec (reshape it, or reconcile exactly); its
    record is stamped with the watermark, so silver then records the spec it was built under.

    Raises:
        InvalidPipelineSpec: the spec's transforms are refused (`cdf_platform.spark.conform`).
        DataQualityError: the snapshot has a null or duplicated key, or a NULL sequence value.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: the snapshot cannot be read.
        TargetOwnershipConflict, IncompatibleSchemaChange: silver cannot take the snapshot.
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
    rewrite = rewrite or SpecRewrite()
    if rewrite.reshape:
        # The whole table is replaced, schema included: only its owner is checked.
        check_silver_owner(spec.target, spec.id)
    else:
        layout = ensure_silver(spark, spec.target, spec.id, snapshot.schema, layout)
    if rewrite.deletion_vectors is not None:
        set_deletion_vectors(spark, spec.target, enabled=rewrite.deletion_vectors)
    fault_point(FaultPoint.DURING_REBUILD)
    generation = rebuild_generation(silver, version, source_reset=source_reset)
    stamp = silver_stamp(
        spec.id,
        generation=generation,
        run_id=run_id,
        mode=mode,
        start_version=None,
        end_version=version,
        source_table_id=source_table_id,
        **spec_metadata(rewrite.record),
    )
    writer = SilverWriter(spark, spec.target, layout, stamp, generation)
    deleted_at = version_timestamp or datetime.now(UTC)
    reshape, exact = rewrite.reshape, rewrite.exact
    classified(
        ctx, lambda: writer.reconcile(snapshot, deleted_at=deleted_at, reshape=reshape, exact=exact)
    )
    return RebuildOutcome(version, generation, stamp.app_id, layout.data_columns)
