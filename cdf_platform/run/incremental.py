"""An incremental run: the pinned range of bronze's change feed read and collapsed to one
change per key, applied to silver in one stamped MERGE, then its row counts and its record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

from cdf_platform.core.faults import FaultPoint, fault_point
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.run.context import RunContext, RunOutcome
from cdf_platform.run.record import applied_outcome, record
from cdf_platform.run.tuning import RunTuning
from cdf_platform.spark.read.change_feed import FEED_COLUMNS, ReadContext, classified, read_changes
from cdf_platform.spark.read.changes import ChangeOrder, collapse_changes
from cdf_platform.spark.runtime.small_steps import StateLoad, load_table_state, loading_table_state
from cdf_platform.spark.table.silver_layout import SilverLayout
from cdf_platform.spark.table.silver_table import ensure_silver
from cdf_platform.spark.write.merge import changes_key_filter
from cdf_platform.spark.write.metrics import commit_counts, find_run_commit
from cdf_platform.spark.write.silver_writer import SilverWriter, silver_stamp
from cdf_platform.state.watermark import read_silver_state, spec_metadata

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cdf_platform.core.spec.expectations import ExpectationCounts
    from cdf_platform.run.strategy import WriteStrategy
    from cdf_platform.spark.quality.quality_gate import Judgement
    from cdf_platform.spark.read.changes import CollapsedChanges
    from cdf_platform.spark.write.merge import Truncation, TxnStamp

logger = logging.getLogger(__name__)

# The timed steps of an incremental run's silver write (the load log's `write_seconds` is their
# sum); the run's other steps: plan, spark_start, read, commit_counts, control, lag_after.
WRITE_STEPS = ("silver_check", "silver_state", "key_filter", "merge")


@dataclass(frozen=True)
class _ChangeSet:
    """The change set read for the run, and silver's log state loading beside it."""

    ctx: ReadContext
    changes: DataFrame
    data_columns: list[str]
    collapsed: CollapsedChanges
    truncation: Truncation | None
    silver_state: StateLoad
    judgement: Judgement

    def release(self) -> None:
        """Drop the cached change rows."""
        self.collapsed.release()
        self.judgement.release()


def run_incremental(run: RunContext, plan: RunPlan, strategy: WriteStrategy) -> RunOutcome:
    """Apply the plan's range to silver and record it.

    Raises:
        CdfPlatformError: the classified read or write failure (a lost window among them: the
            read re-checks it).
    """
    spark = run.spark
    tuning = RunTuning.of(spark, plan)
    with tuning.run():
        run.mark()
        change_set = _read(run, plan, strategy, tuning)
        try:
            fault_point(FaultPoint.AFTER_READ)
            _write(run, plan, strategy, tuning, change_set)
            # Silver's commit landed, unless Delta skipped it (`_count_and_record` unmarks it).
            run.committed_at = datetime.now(UTC)
        finally:
            change_set.release()
        run.lap("merge")
        # `write` is silver's part of the run: its checks, the key filter and the MERGE.
        run.timings["write"] = sum(run.timings.get(step, 0.0) for step in WRITE_STEPS)
        fault_point(FaultPoint.AFTER_MERGE)
        return _count_and_record(run, plan, tuning, change_set.judgement.counts)


def _read(run: RunContext, plan: RunPlan, strategy: WriteStrategy, tuning: RunTuning) -> _ChangeSet:
    """The range's change rows, collapsed per key. The change set and silver's log state are
    small: built without generated code, and silver's state (which the MERGE reuses) loaded on
    a second thread while the changes are read."""
    spec = plan.spec
    assert plan.start_version is not None
    ctx = ReadContext(spec.id, spec.source, plan.start_version, plan.end_version)
    raw = read_changes(
        run.spark, spec.source, ctx.start_version, ctx.end_version, pipeline_id=spec.id
    )
    judgement, truncation = strategy.change_rows(run.spark, raw, ctx)
    changes = judgement.rows
    data_columns = [c for c in changes.columns if c not in FEED_COLUMNS]
    with tuning.small_reads():
        with loading_table_state(run.spark, spec.target) as state:
            collapsed = collapse_changes(
                changes, spec.keys, data_columns, ctx, ChangeOrder.of(spec)
            )
            run.lap("read")
            run.read_at = datetime.now(UTC)
        run.lap("silver_state")
    return _ChangeSet(ctx, changes, data_columns, collapsed, truncation, state, judgement)


def _write(
    run: RunContext,
    plan: RunPlan,
    strategy: WriteStrategy,
    tuning: RunTuning,
    change_set: _ChangeSet,
) -> None:
    """Silver checked (created, or its columns added), then the stamped MERGE."""
    spec, spark, ctx = plan.spec, run.spark, change_set.ctx
    columns = change_set.changes.select(*(f"`{c}`" for c in change_set.data_columns))
    layout = SilverLayout.of(spec, columns.schema)
    storage = run.control.storage
    layout = ensure_silver(spark, spec.target, spec.id, columns.schema, layout, storage=storage)
    run.lap("silver_check")
    silver_state = change_set.silver_state.state
    if silver_state is None:  # switched off, or failed on its thread: its error, classified
        with tuning.small_reads():
            silver_state = classified(ctx, partial(load_table_state, spark, spec.target))
        run.lap("silver_state")
    writer = SilverWriter(
        spark, spec.target, layout, range_stamp(run, plan), plan.silver.generation, storage
    )
    # The key filter on silver: the SCD1 MERGE takes it, and the quarantine's guard reads silver
    # through it; computed once for both.
    silver_filter = None
    if writer.filters_keys or strategy.gate.reads_silver:
        with tuning.small_reads():
            silver_filter = classified(
                ctx,
                partial(
                    changes_key_filter, spark, spec.target, change_set.collapsed, layout, storage
                ),
            )
        run.lap("key_filter")
    # Before silver's commit: a crash between the two makes the rerun write the same rows.
    hold = partial(
        strategy.gate.hold,
        spark,
        change_set.judgement,
        run_id=run.run_id,
        silver_filter=silver_filter,
    )
    classified(ctx, hold)
    fault_point(FaultPoint.AFTER_QUARANTINE)
    apply = partial(
        strategy.apply,
        spark,
        writer,
        change_set.collapsed,
        change_set.truncation,
        silver_filter=silver_filter if writer.filters_keys else None,
    )
    with tuning.merge(silver_state):
        classified(ctx, apply, f"merging {ctx.described} into silver {spec.target}")


def range_stamp(run: RunContext, plan: RunPlan, mode: RunMode = RunMode.INCREMENTAL) -> TxnStamp:
    """The stamp of the plan's silver commit over its range (its txn and metadata), for an
    incremental run or (`mode`) an advance."""
    assert plan.start_version is not None
    return silver_stamp(
        plan.spec.id,
        generation=plan.silver.generation,
        run_id=run.run_id,
        mode=mode.value,
        start_version=plan.start_version,
        end_version=plan.end_version,
        source_table_id=plan.window.table_id,
        **spec_metadata(plan.spec_record, plan.forward_only_after()),
    )


def newer_run_outcome(run: RunContext, plan: RunPlan) -> RunOutcome:
    """A newer run of this pipeline applied a later range first and nothing was written:
    silver's watermark is the truth to report, and recorded."""
    spec = plan.spec
    applied = read_silver_state(spec.target, spec.id, storage=run.control.storage).watermark
    logger.warning("%s: a newer run already applied up to %s; nothing written", spec.id, applied)
    outcome = RunOutcome(
        RunMode.INCREMENTAL, applied, start=plan.start_version, end=plan.end_version
    )
    record(run, plan, outcome)
    return outcome


def _count_and_record(
    run: RunContext, plan: RunPlan, tuning: RunTuning, judged: ExpectationCounts | None
) -> RunOutcome:
    """The rows the run's silver commit changed (and `judged`: its expectations' counts),
    recorded in the control tables."""
    spec = plan.spec
    storage = run.control.storage
    committed = find_run_commit(spec.target, spec.id, run.run_id, storage)
    if committed is None:
        # Delta skipped the MERGE (txnVersion not above the stored one).
        run.committed_at = None
        return newer_run_outcome(run, plan)
    with tuning.small_reads():
        counts = commit_counts(run.spark, spec.target, committed, spec.delete_mode)
    run.lap("commit_counts")
    fault_point(FaultPoint.BEFORE_CONTROL)
    outcome = applied_outcome(plan, RunMode.INCREMENTAL, plan.end_version, counts, wrote=True)
    outcome = replace(outcome, expectations=judged)
    record(run, plan, outcome)
    run.lap("control")
    return outcome
