"""One writer per silver layout: how a change set (an incremental run) and a bronze snapshot (an
initial load or a rebuild) reach silver, for SCD1, SCD2 and sequenced SCD2, each write carrying
the watermark stamp (`silver_stamp`) in its one commit.

The incremental run (`cdf_platform.run`) and the rebuild (`cdf_platform.spark.reconcile.rebuild`)
both write through `SilverWriter`, so a layout's staging and MERGE are chosen in one place.

Example:
    >>> stamp = silver_stamp("orders", generation=0, run_id="r1", mode="incremental",
    ...     start_version=55, end_version=57, source_table_id="t-1")
    >>> stamp.app_id, stamp.version
    ('orders', 57)
    >>> writer = SilverWriter(spark, target, layout, stamp, generation=0)  # doctest: +SKIP
    >>> writer.apply_changes(collapsed, silver_filter=None)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdf_platform.core.spec.modes import HistoryMode
from cdf_platform.core.storage import StorageConfig
from cdf_platform.spark.table.silver_table import holds_files
from cdf_platform.spark.write.history import merge_history, staged_history, staged_reconcile
from cdf_platform.spark.write.merge import (
    Truncation,
    TxnStamp,
    load_snapshot,
    merge_changes,
    reconcile_snapshot,
)
from cdf_platform.spark.write.sequenced_history import (
    merge_sequenced_history,
    staged_sequenced_history,
    staged_sequenced_reconcile,
)
from cdf_platform.state.watermark import app_id, user_metadata

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdf_platform.spark.read.changes import CollapsedChanges
    from cdf_platform.spark.table.silver_layout import SilverLayout


def silver_stamp(
    pipeline_id: str,
    *,
    generation: int,
    run_id: str,
    mode: str,
    start_version: int | None,
    end_version: int,
    source_table_id: str | None,
    **spec_fields: Any,
) -> TxnStamp:
    """The stamp of a silver write: txn app id of `generation`, txn version (the watermark)
    `end_version`, and the commit's `userMetadata` naming the run (`spec_fields`: the spec
    record, `cdf_platform.state.watermark.spec_metadata`)."""
    return TxnStamp(
        app_id=app_id(pipeline_id, generation),
        version=end_version,
        metadata=user_metadata(
            pipeline_id=pipeline_id,
            run_id=run_id,
            mode=mode,
            start_version=start_version,
            end_version=end_version,
            source_table_id=source_table_id,
            generation=generation,
            **spec_fields,
        ),
    )


@dataclass(frozen=True)
class _ChangeSet:
    """A change set to apply, with how (`SilverWriter.apply_changes`)."""

    collapsed: CollapsedChanges
    silver_filter: str | None
    fold: bool
    recorded_deletes: DataFrame | None
    truncation: Truncation | None


class _LayoutWrites:
    """How one silver layout stages and merges a change set and a snapshot."""

    filters_keys = False

    def apply(self, writer: SilverWriter, changes: _ChangeSet) -> None:
        raise NotImplementedError

    def reconcile(
        self, writer: SilverWriter, snapshot: DataFrame, *, deleted_at: datetime, exact: bool
    ) -> None:
        raise NotImplementedError


class _CurrentRows(_LayoutWrites):
    """SCD1: silver holds each key's current row; the MERGE takes a key filter on silver's
    files (`cdf_platform.spark.write.merge.changes_key_filter`)."""

    filters_keys = True

    def apply(self, writer: SilverWriter, changes: _ChangeSet) -> None:
        merge_changes(
            writer.spark,
            writer.target,
            changes.collapsed,
            writer.layout,
            writer.stamp,
            changes.silver_filter,
            quiet=changes.fold,
            truncation=changes.truncation,
        )

    def reconcile(
        self, writer: SilverWriter, snapshot: DataFrame, *, deleted_at: datetime, exact: bool
    ) -> None:
        spark, target, layout = writer.spark, writer.target, writer.layout
        if not holds_files(target, writer.storage):
            # Nothing to reconcile with: an append, sorted by key (file statistics by key range).
            load_snapshot(spark, target, snapshot, layout, writer.stamp)
            return
        if exact:
            layout = replace(layout, ignore_null_updates=False, sequence_by=None)
        reconcile_snapshot(spark, target, snapshot, layout, writer.stamp, deleted_at)


class _History(_LayoutWrites):
    """SCD2: each key's versions, staged against silver's open rows."""

    def apply(self, writer: SilverWriter, changes: _ChangeSet) -> None:
        spark, target, layout = writer.spark, writer.target, writer.layout
        staged = staged_history(spark, target, changes.collapsed.frame, layout)
        merge_history(spark, target, staged, layout, writer.stamp)

    def reconcile(
        self, writer: SilverWriter, snapshot: DataFrame, *, deleted_at: datetime, exact: bool
    ) -> None:
        spark, target, layout = writer.spark, writer.target, writer.layout
        version = writer.stamp.version
        staged = staged_reconcile(spark, target, snapshot, layout, version, deleted_at)
        merge_history(spark, target, staged, layout, writer.stamp)


class _SequencedHistory(_LayoutWrites):
    """Sequenced SCD2: each key's versions re-folded under `sequence_by`."""

    def apply(self, writer: SilverWriter, changes: _ChangeSet) -> None:
        spark, target, layout = writer.spark, writer.target, writer.layout
        staged = staged_sequenced_history(
            spark,
            target,
            changes.collapsed.frame,
            layout,
            writer.generation,
            skip_known=changes.fold,
            recorded_deletes=changes.recorded_deletes,
        )
        merge_sequenced_history(spark, target, staged, layout, writer.stamp)

    def reconcile(
        self, writer: SilverWriter, snapshot: DataFrame, *, deleted_at: datetime, exact: bool
    ) -> None:
        spark, target, layout = writer.spark, writer.target, writer.layout
        staged = staged_sequenced_reconcile(
            spark, target, snapshot, layout, writer.stamp.version, writer.generation
        )
        merge_sequenced_history(spark, target, staged, layout, writer.stamp)


def _layout_writes(layout: SilverLayout) -> _LayoutWrites:
    """The one choice of how `layout` is written."""
    if layout.sequenced_history:
        return _SequencedHistory()
    if layout.history is HistoryMode.SCD2:
        return _History()
    return _CurrentRows()


@dataclass(frozen=True)
class SilverWriter:
    """Silver `target` of `layout`, written under `stamp` (source generation `generation`).
    How the layout stages and merges is chosen once, from `layout`.

    Attributes:
        spark: The session the write runs on.
        target: Silver's location.
        layout: Silver's shape (keys, history, sequence, delete mode, columns).
        stamp: The watermark and metadata the write's commit carries.
        generation: The source generation of the stamp (sequenced history records it per row).
        storage: The lake's object-store options (silver's log is read with them).
    """

    spark: SparkSession
    target: str
    layout: SilverLayout
    stamp: TxnStamp
    generation: int
    storage: StorageConfig
    writes: _LayoutWrites = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "writes", _layout_writes(self.layout))

    @property
    def filters_keys(self) -> bool:
        """Whether an incremental write takes a key filter on silver's files
        (`cdf_platform.spark.write.merge.changes_key_filter`): the SCD1 MERGE does; a history
        layout stages against silver's open rows instead."""
        return self.writes.filters_keys

    def apply_changes(
        self,
        collapsed: CollapsedChanges,
        silver_filter: str | None,
        *,
        fold: bool = False,
        recorded_deletes: DataFrame | None = None,
        truncation: Truncation | None = None,
    ) -> None:
        """Apply a collapsed change set (an incremental run) in one stamped MERGE;
        `silver_filter` is the key filter of an SCD1 write (`filters_keys`), else None.
        `fold`: the changes are every event an event log still holds (its rebuild), some of
        which silver took already: those write nothing. `recorded_deletes`: an event log's
        tombstones, for sequenced history (`staged_sequenced_history`); `truncation`: an event
        log's truncate, for SCD1 (`merge_changes_sql`)."""
        changes = _ChangeSet(collapsed, silver_filter, fold, recorded_deletes, truncation)
        self.writes.apply(self, changes)

    def reconcile(
        self, snapshot: DataFrame, *, deleted_at: datetime, reshape: bool, exact: bool
    ) -> None:
        """Make silver the bronze snapshot at the stamp's version in one stamped commit: its
        rows replaced in a new shape (`reshape`), else reconciled by a MERGE that changes only
        the rows that differ (an append when silver holds no file yet). `exact` reconciles
        SCD1 values as they are, not kept by `ignore_null_updates` or `sequence_by`;
        `deleted_at` closes (or soft-deletes) the rows the snapshot no longer holds."""
        if reshape:
            load_snapshot(self.spark, self.target, snapshot, self.layout, self.stamp, replace=True)
            return
        self.writes.reconcile(self, snapshot, deleted_at=deleted_at, exact=exact)
