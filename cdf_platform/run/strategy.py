"""How a pipeline's changes reach silver, chosen once from its spec: its source kind (a change
feed or a snapshot, or an event log with its tombstones) decides how change rows are read, how
a change set is applied and how silver is reconciled with a snapshot; its layout (SCD1, SCD2,
sequenced SCD2) decides the staging and the MERGE, inside `SilverWriter`.

Example:
    >>> strategy = WriteStrategy.of(spec, control)  # doctest: +SKIP
    >>> strategy.apply(spark, writer, collapsed, truncation, silver_filter=None)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from cdf_platform.spark.quality.quality_gate import Judgement, QualityGate
from cdf_platform.spark.read.change_feed import classified
from cdf_platform.spark.reconcile.event_fold import fold_events
from cdf_platform.spark.reconcile.event_source import Tombstones, change_rows
from cdf_platform.spark.reconcile.rebuild import rebuild_silver
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
    """The write strategy of one pipeline (module doc).

    Attributes:
        spec: The pipeline.
        tombstones: An event log's tombstones and truncates (None: a change feed or snapshot
            source, whose deletes are rows of the feed itself).
    """

    spec: PipelineSpec
    tombstones: Tombstones | None
    gate: QualityGate

    @classmethod
    def of(cls, spec: PipelineSpec, control: ControlTable) -> WriteStrategy:
        """The strategy of `spec`, whose control tables are `control`."""
        gate = QualityGate(spec, quarantine_path(control.root, spec.id), control.storage)
        return cls(spec, Tombstones.of(control, spec), gate)

    def change_rows(
        self, spark: SparkSession, feed: DataFrame, ctx: ReadContext
    ) -> tuple[Judgement, Truncation | None]:
        """The change rows of bronze's feed (an event log's as its events' images), judged by
        the spec's expectations (`QualityGate.screen_changes`: counted, refused by a `fail`
        rule, the kept-out rows made deletes), and an event log's latest truncate
        (`cdf_platform.spark.reconcile.event_source.change_rows`).

        Raises:
            DataQualityError: a row fails a `fail` rule.
        """
        judged, truncation = change_rows(spark, feed, self.spec, ctx, judged=True)
        end = ctx.end_version
        judgement = classified(ctx, lambda: self.gate.screen_changes(judged, version=end))
        return judgement, truncation

    def apply(
        self,
        spark: SparkSession,
        writer: SilverWriter,
        collapsed: CollapsedChanges,
        truncation: Truncation | None,
        *,
        silver_filter: str | None,
    ) -> None:
        """Apply an incremental run's collapsed change set to silver in one stamped commit; an
        event log's deletes and truncate are recorded first (`Tombstones.apply`)."""
        if self.tombstones is not None:
            self.tombstones.apply(spark, writer, collapsed, truncation, silver_filter=silver_filter)
        else:
            writer.apply_changes(collapsed, silver_filter)

    def reconcile(self, spark: SparkSession, request: RebuildRequest) -> RebuildOutcome:
        """Make silver bronze's snapshot at `request.version` (an initial load, a snapshot
        source's run, a rebuild): an event log by folding every event it holds, any other
        source by reconciling with the snapshot."""
        request = replace(request, gate=self.gate)
        if self.tombstones is not None:
            return fold_events(spark, self.spec, request, self.tombstones)
        return rebuild_silver(spark, self.spec, request)
