"""What a consumer asset of the watermark IO manager receives and returns: the read of one
input table (`ChangeBatch`) and what it writes back (`MergeRows`, `ReplaceRows`; both
`TableWrite`). The write itself, one commit with every input's pinned version, is
`cdf_platform.spark.write.consumer_write`'s.

The read follows its `InputPlan` (`cdf_platform.planning.consumers.input_plan`): nothing new
(no Spark), the change feed of a pinned range collapsed to the latest change per key (the
platform's own collapse: a key an UPDATE renamed is deleted, a delete and insert in one commit
leave the row), or the snapshot at the pinned version for a full run.

Example:
    >>> batch.mode  # doctest: +SKIP
    <BatchMode.INCREMENTAL: 'incremental'>
    >>> totals = batch.changes().groupBy("day").agg(...)  # doctest: +SKIP
    >>> MergeRows(totals, keys=["day"], update={"total": "t.total + s.total"})  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.planning.consumers.input_plan import BatchMode, InputPlan, recompute_action
from cdf_platform.spark.read.change_feed import FEED_COLUMNS, ReadContext, classified, read_changes
from cdf_platform.spark.read.changes import CollapsedChanges, collapse_changes
from cdf_platform.spark.runtime.small_steps import interpreted

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class ChangeBatch:
    """What a consumer receives from one input: its mode, the pinned versions, and the rows.

    Attributes:
        plan: The pinned read (`mode`, `watermark`, `end_version`, why it is full).
        keys: The input's key columns (for `changes()`).
    """

    plan: InputPlan
    keys: tuple[str, ...]
    session: Callable[[], SparkSession] = field(repr=False)
    _collapsed: CollapsedChanges | None = field(default=None, init=False, repr=False)

    @property
    def mode(self) -> BatchMode:
        """Nothing new, incremental, or full."""
        return self.plan.mode

    @property
    def nothing_new(self) -> bool:
        """The input has no version after the consumer's watermark."""
        return self.plan.mode is BatchMode.NOTHING_NEW

    @property
    def full(self) -> bool:
        """A full run: recompute from `snapshot()` and return `ReplaceRows`."""
        return self.plan.mode is BatchMode.FULL

    @property
    def start_version(self) -> int | None:
        """The first input version of an incremental batch."""
        return self.plan.start_version

    @property
    def end_version(self) -> int:
        """The pinned input version the consumer's write records."""
        return self.plan.end_version

    def _context(self, *, snapshot: bool = False) -> ReadContext:
        plan, action = self.plan, recompute_action(self.plan.consumer)
        if snapshot:
            return ReadContext.at_version(
                plan.consumer,
                plan.table,
                plan.end_version,
                feed=f"snapshot of {plan.input_id}",
                action=action,
            )
        return ReadContext(
            plan.consumer,
            plan.table,
            plan.end_version if plan.start_version is None else plan.start_version,
            plan.end_version,
            feed=f"change feed of {plan.input_id}",
            action=action,
        )

    def _require_incremental(self, what: str) -> int:
        start = self.plan.start_version
        if start is None:
            raise InvalidPipelineSpec(
                f"{self.plan.input_id} is a {self.plan.mode.value} batch for {self.plan.consumer}: "
                f"it has no {what}",
                pipeline_id=self.plan.consumer,
                table=self.plan.table,
                action="check `batch.nothing_new` / `batch.full` first; a full batch is read "
                "with `batch.snapshot()` and written back with `ReplaceRows`",
            )
        return start

    def raw_changes(self) -> DataFrame:
        """The input's change feed rows of the pinned range, as Delta gives them
        (`_change_type`, `_commit_version`, `_commit_timestamp`; update pre- and post-images)."""
        start = self._require_incremental("change rows")
        spark = self.session()
        return read_changes(
            spark, self.plan.table, start, self.plan.end_version, context=self._context()
        )

    def changes(self) -> DataFrame:
        """The latest change per key of the pinned range: the row and `_change_type` (`insert`,
        `update_postimage` or `delete`: a delete carries the deleted row), `_commit_version`,
        `_commit_timestamp`.

        Raises:
            InvalidPipelineSpec: the batch is not incremental, or the input has no keys.
            DataQualityError: a null key, or two rows for one key in one commit.
        """
        if self._collapsed is None:
            raw = self.raw_changes()
            if not self.keys:
                raise InvalidPipelineSpec(
                    f"{self.plan.input_id} declares no keys, so its changes cannot be collapsed "
                    "per key",
                    pipeline_id=self.plan.consumer,
                    table=self.plan.table,
                    action="give the input asset a `keys` metadata entry (or the input "
                    "`AssetIn(metadata={'keys': [...]})`), or read `batch.raw_changes()`",
                )
            data = [c for c in raw.columns if c not in FEED_COLUMNS]
            # A small step: built without generated code (`cdf_platform.spark.runtime.small_steps`).
            with interpreted(self.session()):
                self._collapsed = collapse_changes(raw, self.keys, data, self._context())
        return self._collapsed.frame

    def snapshot(self) -> DataFrame:
        """The input at the pinned end version."""
        spark = self.session()
        return classified(
            self._context(snapshot=True),
            lambda: (
                spark.read.format("delta")
                .option("versionAsOf", self.plan.end_version)
                .load(self.plan.table)
            ),
        )

    def release(self) -> None:
        """Drop what `changes()` cached."""
        if self._collapsed is not None:
            self._collapsed.release()
            self._collapsed = None


@dataclass(frozen=True)
class TableWrite:
    """What a consumer asset writes to its table: `MergeRows` or `ReplaceRows` (annotate the
    asset `-> TableWrite | None`; None writes nothing).

    Attributes:
        rows: The rows to write.
    """

    rows: DataFrame


@dataclass(frozen=True)
class MergeRows(TableWrite):
    """Merge `rows` into the consumer's table on `keys`.

    The change feed's columns (`_change_type`, `_commit_version`, `_commit_timestamp`) are
    never written, but `update` and `delete_when` can use them (a batch's `changes()` can be
    merged as it is: `delete_when="s._change_type = 'delete'"`).

    Attributes:
        rows: One row per key.
        keys: The columns a row is matched on (required); NULL matches NULL, as a group by a
            nullable column has one NULL group.
        update: Column -> SQL expression over the table's row `t` and the new row `s` for a
            matched row (default: `s.<column>`), e.g. `{"total": "t.total + s.total"}` to apply
            a delta.
        delete_when: SQL over `s`: a matched row it holds for is deleted (and such a row is
            never inserted).
        delete_matched_when: SQL over the table's row `t` and the new row `s`: a matched row
            it holds for is deleted instead of updated, e.g. `t.n + s.n = 0` when a delta
            empties a count (a row not in the table is inserted as usual).
    """

    keys: Sequence[str] = ()
    update: Mapping[str, str] | None = None
    delete_when: str | None = None
    delete_matched_when: str | None = None


@dataclass(frozen=True)
class ReplaceRows(TableWrite):
    """Replace the consumer's table with `rows` (a full recompute)."""


__all__ = ["ChangeBatch", "MergeRows", "ReplaceRows", "TableWrite"]
