"""How a pipeline's changes reach silver, chosen once from its spec: its source kind (a change
feed or a snapshot, or an event log with its tombstones) decides how change rows are read, how
a change set is applied, how silver is reconciled with a snapshot, which rows a verification
expects and what a rebuild's load-log row says of an SCD2 history; its layout (SCD1, SCD2,
sequenced SCD2) decides the staging and the MERGE, inside `SilverWriter`. One class per source
kind, and one choice of it (`WriteStrategy.of`): no other module of a run asks the kind how to
write.

Example:
    >>> strategy = WriteStrategy.of(spec, control)  # doctest: +SKIP
    >>> strategy.apply(spark, writer, collapsed, truncation, silver_filter=None)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cdf_platform.core.spec.modes import ChangeSource, HistoryMode
from cdf_platform.planning.plan import RunMode
from cdf_platform.spark.quality.conform import change_rows
from cdf_platform.spark.quality.quality_gate import Judgement, QualityGate
from cdf_platform.spark.read.change_feed import classified
from cdf_platform.spark.reconcile.event_fold import fold_events
from cdf_platform.spark.reconcile.event_source import Tombstones, event_change_rows
from cdf_platform.spark.reconcile.rebuild import rebuild_silver
from cdf_platform.spark.reconcile.silver_comparison import (
    ExpectedRows,
    SilverPins,
    folded_rows,
    snapshot_rows,
)
from cdf_platform.spark.write.history import rebuild_note
from cdf_platform.state.quarantine import quarantine_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdf_platform.core.spec.pipeline_spec import PipelineSpec
    from cdf_platform.spark.read.change_feed import ReadContext
    from cdf_platform.spark.read.changes import CollapsedChanges
    from cdf_platform.spark.reconcile.rebuild import RebuildOutcome, RebuildRequest
    from cdf_platform.spark.write.merge import Truncation
    from cdf_platform.spark.write.silver_writer import SilverWriter
    from cdf_platform.state.control import ControlTable


@dataclass(frozen=True)
class WriteStrategy:
    """The write strategy of one pipeline (module doc): `ChangeFeedWrites` or `EventLogWrites`.

    Attributes:
        spec: The pipeline.
        gate: Its quality gate (expectations, quarantine), which every kind's rows pass.
    """

    spec: PipelineSpec
    gate: QualityGate

    @classmethod
    def of(cls, spec: PipelineSpec, control: ControlTable) -> WriteStrategy:
        """The strategy of `spec` (its source kind's class), whose control tables are
        `control`."""
        gate = QualityGate(spec, quarantine_path(control.root, spec.id), control.storage)
        return _BY_KIND[spec.changes].made(spec, gate, control)

    @classmethod
    def made(cls, spec: PipelineSpec, gate: QualityGate, control: ControlTable) -> WriteStrategy:
        """This kind's strategy of `spec`."""
        return cls(spec, gate)

    def change_rows(
        self, spark: SparkSession, feed: DataFrame, ctx: ReadContext
    ) -> tuple[Judgement, Truncation | None]:
        """The change rows of bronze's feed (an event log's as its events' images), judged by
        the spec's expectations (`QualityGate.screen_changes`: counted, refused by a `fail`
        rule, the kept-out rows made deletes), and an event log's latest truncate.

        Raises:
            DataQualityError: a row fails a `fail` rule.
        """
        judged, truncation = self._read(spark, feed, ctx)
        end = ctx.end_version
        judgement = classified(ctx, lambda: self.gate.screen_changes(judged, version=end))
        return judgement, truncation

    def reconcile(self, spark: SparkSession, request: RebuildRequest) -> RebuildOutcome:
        """Make silver bronze's snapshot at `request.version` (an initial load, a snapshot
        source's run, a rebuild, a verification's repair), through the quality gate."""
        return self._reconcile(spark, replace(request, gate=self.gate))

    def _read(
        self, spark: SparkSession, feed: DataFrame, ctx: ReadContext
    ) -> tuple[DataFrame, Truncation | None]:
        raise NotImplementedError

    def _reconcile(self, spark: SparkSession, request: RebuildRequest) -> RebuildOutcome:
        raise NotImplementedError

    def apply(
        self,
        spark: SparkSession,
        writer: SilverWriter,
        collapsed: CollapsedChanges,
        truncation: Truncation | None,
        *,
        silver_filter: str | None,
    ) -> None:
        """Apply an incremental run's collapsed change set to silver in one stamped commit."""
        raise NotImplementedError

    def expected_rows(self, spark: SparkSession, pins: SilverPins) -> ExpectedRows:
        """The rows a verification expects silver to hold at `pins.bronze_version` (those a
        rebuild at that version would write)."""
        raise NotImplementedError

    def history_note(self, watermark: int | None, version: int, mode: RunMode) -> str | None:
        """What a snapshot read at `version` (a run of `mode`) cannot put in an SCD2 history
        kept from `watermark`, for the load log; None when nothing is missing."""
        raise NotImplementedError


class ChangeFeedWrites(WriteStrategy):
    """Bronze's change feed (`changes: cdf`), or its snapshots (`changes: snapshots`, whose
    every run is a reconcile): the feed's rows are the changes, its deletes included."""

    def _read(
        self, spark: SparkSession, feed: DataFrame, ctx: ReadContext
    ) -> tuple[DataFrame, Truncation | None]:
        return change_rows(spark, feed, self.spec, judged=True), None

    def apply(
        self,
        spark: SparkSession,
        writer: SilverWriter,
        collapsed: CollapsedChanges,
        truncation: Truncation | None,
        *,
        silver_filter: str | None,
    ) -> None:
        writer.apply_changes(collapsed, silver_filter)

    def _reconcile(self, spark: SparkSession, request: RebuildRequest) -> RebuildOutcome:
        return rebuild_silver(spark, self.spec, request)

    def expected_rows(self, spark: SparkSession, pins: SilverPins) -> ExpectedRows:
        return snapshot_rows(spark, self.spec, pins)

    def history_note(self, watermark: int | None, version: int, mode: RunMode) -> str | None:
        # A snapshot source's history only ever holds its snapshots: that is what it is, not a
        # loss. A verification's repair at the watermark misses no change either.
        if self.spec.history is not HistoryMode.SCD2 or watermark is None:
            return None
        if mode is RunMode.SNAPSHOT or (mode is RunMode.VERIFY_REPAIR and version == watermark):
            return None
        return rebuild_note(watermark, version)


@dataclass(frozen=True)
class EventLogWrites(WriteStrategy):
    """An append-only log of change events (`changes: events`): its events' images are the
    changes, and its deletes and truncates are kept as tombstones (`Tombstones`).

    Attributes:
        tombstones: The event log's tombstones and truncates.
    """

    tombstones: Tombstones

    @classmethod
    def made(cls, spec: PipelineSpec, gate: QualityGate, control: ControlTable) -> WriteStrategy:
        tombstones = Tombstones.of(control, spec)
        # `changes: events` needs `events` and `sequence_by` (`PipelineSpec._check_events`).
        assert tombstones is not None
        return cls(spec, gate, tombstones)

    def _read(
        self, spark: SparkSession, feed: DataFrame, ctx: ReadContext
    ) -> tuple[DataFrame, Truncation | None]:
        return event_change_rows(spark, feed, self.spec, ctx, judged=True)

    def apply(
        self,
        spark: SparkSession,
        writer: SilverWriter,
        collapsed: CollapsedChanges,
        truncation: Truncation | None,
        *,
        silver_filter: str | None,
    ) -> None:
        """Record the change set's deletes and truncate first (`Tombstones.apply`), then
        apply it."""
        self.tombstones.apply(spark, writer, collapsed, truncation, silver_filter=silver_filter)

    def _reconcile(self, spark: SparkSession, request: RebuildRequest) -> RebuildOutcome:
        # Every event bronze holds is folded again.
        return fold_events(spark, self.spec, request, self.tombstones)

    def expected_rows(self, spark: SparkSession, pins: SilverPins) -> ExpectedRows:
        return folded_rows(spark, self.spec, pins, self.tombstones)

    def history_note(self, watermark: int | None, version: int, mode: RunMode) -> str | None:
        # Its rebuild folds every event bronze holds, each dated by its own sequence: the
        # history between the watermark and the version is whole.
        return None


# The one choice of a source kind's strategy.
_BY_KIND: dict[ChangeSource, type[WriteStrategy]] = {
    ChangeSource.CDF: ChangeFeedWrites,
    ChangeSource.SNAPSHOTS: ChangeFeedWrites,
    ChangeSource.EVENTS: EventLogWrites,
}
