"""The pipeline spec's modes, each a `str` Enum whose values the pipelines file spells: what a
bronze delete does to silver (`DeleteMode`), what silver keeps of a key's past (`HistoryMode`),
how bronze gives its changes (`ChangeSource`), what a run does when the change feed cannot be
replayed (`FallbackMode`) or the spec's row-shaping fields changed (`OnSpecChange`), and what
the scheduled verification does with a silver that differs (`VerifyRepair`).

`cdf_platform.core.spec.pipeline_spec` gives each a field of `PipelineSpec`.

Example:
    >>> DeleteMode("soft"), ChangeSource.SNAPSHOTS.replays_history
    (<DeleteMode.SOFT: 'soft'>, False)
"""

from __future__ import annotations

from enum import StrEnum


class DeleteMode(StrEnum):
    """What a bronze delete does to the silver row."""

    HARD = "hard"
    """Remove the row from silver."""
    SOFT = "soft"
    """Keep the row, set `_is_deleted = true` and `_deleted_at` to the delete's commit time."""


class HistoryMode(StrEnum):
    """What silver keeps of a key's past."""

    SCD1 = "scd1"
    """The current row only (type 1)."""
    SCD2 = "scd2"
    """Every version, with `__start_at` / `__end_at` (type 2): an update of a tracked column
    closes the current row and opens a new one; a delete closes it. With `sequence_by`,
    versions are ordered and dated by that column."""


class ChangeSource(StrEnum):
    """How bronze gives silver its changes."""

    CDF = "cdf"
    """Bronze's Change Data Feed: a run MERGEs the changes of the versions after the watermark
    (cost proportional to the change)."""
    SNAPSHOTS = "snapshots"
    """Bronze is a snapshot (a table without a change feed: JDBC dumps, files another tool
    overwrites): a run reads it whole at a pinned version and reconciles silver with it, only
    the rows that differ reaching silver's change feed (cost proportional to the table)."""
    EVENTS = "events"
    """Bronze is an append-only log of change events (Debezium, AWS DMS, a Kafka landing): each
    row is one source change with its operation and row image (`events`), ordered by
    `sequence_by`. A run folds the events appended after the watermark; bronze deleting or
    compacting old events changes nothing in silver."""

    @property
    def replays_history(self) -> bool:
        """Whether a run replays bronze's changes after the watermark, so that it needs bronze's
        change feed and a replay window kept for it (`cdf`, `events`); a snapshot source's run
        reads bronze's latest version whole."""
        return self is not ChangeSource.SNAPSHOTS

    @property
    def sequences_each_change(self) -> bool:
        """Whether each change carries its own `sequence_by` value, a delete's included, and one
        commit may hold several changes of a key (`events`); a change feed's delete carries the
        deleted row's values."""
        return self is ChangeSource.EVENTS


class FallbackMode(StrEnum):
    """What an incremental run does when the change feed cannot be replayed."""

    SNAPSHOT_REBUILD = "SNAPSHOT_REBUILD"
    """Reconcile silver from a pinned bronze snapshot (the rebuild sensor launches it)."""
    FAIL_FAST = "FAIL_FAST"
    """Fail, log the incident and wait for a person."""


class OnSpecChange(StrEnum):
    """What a run does when the spec's row-shaping fields changed since silver was written."""

    RECONCILE = "reconcile"
    """Reconcile silver with a pinned bronze snapshot under the new spec (only real
    differences reach silver's change feed); `FAIL_FAST` pipelines refuse instead."""
    FORWARD_ONLY = "forward_only"
    """Apply the new spec to new changes only; rows written before keep the old spec's values
    until the next rebuild. Recorded, and shown by `status` and the checks until then. A change
    of `keys`, `history` or `delete_mode` is never applied forward only."""


class VerifyRepair(StrEnum):
    """What the scheduled verification (`verify_job`) does with a silver that differs from its
    spec applied to bronze."""

    MANUAL = "manual"
    """Report the differing keys and leave silver as it is (`cdf-platform verify --repair`
    repairs)."""
    AUTO = "auto"
    """Repair: reconcile silver quietly (only the differing keys change)."""
