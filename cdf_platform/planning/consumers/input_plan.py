"""What one input of a consumer asset hands it next, decided from the logs alone (no JVM).

A consumer asset (any Dagster asset whose input is a Delta table, loaded through the watermark
IO manager) keeps one watermark per input in its own table's log
(`cdf_platform.state.consumer_marks`). Its next read of an input is:

- nothing new: the input has no version after the watermark (Spark is not started);
- incremental: the change feed of (watermark, latest], pinned, when the replay window still
  holds it, checked the way a pipeline's is (`cdf_platform.planning.lost_window.replay_problem`);
- full: the snapshot at the pinned latest version, on the first read, or when the window is
  lost, the input was recreated (its table id changed, or it is behind the watermark), or the
  consumer's watermarks are gone from its log; unless the consumer is FAIL_FAST, in which
  case those raise the classified error instead.

Example:
    >>> plan = plan_input("gold/revenue", "silver/orders", "/lake/silver/orders", marks,
    ...                   FallbackMode.SNAPSHOT_REBUILD)  # doctest: +SKIP
    >>> plan.mode, plan.start_version, plan.end_version  # doctest: +SKIP
    (<BatchMode.INCREMENTAL: 'incremental'>, 43, 45)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from cdf_platform.core.errors import (
    REBUILDABLE,
    CdfPlatformError,
    ReplayWindowLost,
    SourceReset,
)
from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.planning.lost_window import replay_problem
from cdf_platform.planning.repair import repair_decision
from cdf_platform.state.consumer_marks import ConsumerMarks
from cdf_platform.window.replay_window import (
    ConsumerAssessment,
    ReplayWindow,
    assess_consumer,
    compute_replay_window,
)


def recompute_action(consumer: str) -> str:
    """What repairs a consumer whose input cannot be read incrementally any more."""
    return (
        f"recompute {consumer} from its inputs' snapshots: launch recompute_job for it (under "
        "SNAPSHOT_REBUILD its next run does so by itself); if the window was lost, raise "
        "delta.deletedFileRetentionDuration on the input above the consumer's longest pause"
    )


class BatchMode(StrEnum):
    """What a consumer receives from one input."""

    NOTHING_NEW = "nothing_new"
    """No input version after the consumer's watermark."""
    INCREMENTAL = "incremental"
    """The input's changes after the watermark, up to the pinned end version."""
    FULL = "full"
    """The input's snapshot at the pinned end version (a full recompute)."""


@dataclass(frozen=True)
class InputPlan:
    """One input read of a consumer, pinned.

    Attributes:
        consumer: The consumer's id (its asset key).
        input_id: The input's id (its asset key).
        table: The input table's location.
        mode: What the read hands the consumer.
        watermark: The consumer's watermark on this input (None: never read it).
        end_version: The input's latest version, pinned: what the consumer's write records.
        table_id: The input's Delta table id (recorded with the watermark).
        reason: Why the read is full (first read, or the classified problem).
        problem: The loss that made it full, if any (for the logs and metadata).
        assessment: Lag and headroom of the watermark in the input's replay window.
    """

    consumer: str
    input_id: str
    table: str
    mode: BatchMode
    watermark: int | None
    end_version: int
    table_id: str
    reason: str | None = None
    problem: CdfPlatformError | None = None
    assessment: ConsumerAssessment | None = None

    @property
    def start_version(self) -> int | None:
        """The first input version an incremental read covers."""
        if self.mode is not BatchMode.INCREMENTAL or self.watermark is None:
            return None
        return self.watermark + 1


def plan_input(
    consumer: str,
    input_id: str,
    table: str,
    marks: ConsumerMarks | None,
    fallback: FallbackMode,
    *,
    marks_lost: str | None = None,
    full_requested: str | None = None,
    window: ReplayWindow | None = None,
    now: datetime | None = None,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> InputPlan:
    """Decide the next read of `input_id` (at `table`) by `consumer` (module doc).

    Args:
        marks: The consumer's watermarks (None: it never wrote).
        fallback: What a lost window or a reset does: a full read, or FAIL_FAST's error.
        marks_lost: Why the consumer's watermarks cannot be read, if they cannot.
        full_requested: Why a person or the rebuild sensor asks for a full recompute, if they
            do: the read is full whatever the watermark (FAIL_FAST included).
        window: The input's replay window, if the caller has computed it already.
        storage: The lake's object-store options, to read the input's log with otherwise.

    Raises:
        SourceNotFound: `table` is not a Delta table.
        ReplayWindowLost, SourceReset, IncompatibleSchemaChange, CdfNotEnabled: the window is
            lost and the consumer is FAIL_FAST.
    """
    window = window or compute_replay_window(table, now=now, storage=storage)
    latest = window.latest_version
    mark = marks.inputs.get(input_id) if marks is not None else None
    watermark = mark.version if mark is not None else None

    def plan(
        mode: BatchMode, reason: str | None = None, problem: CdfPlatformError | None = None
    ) -> InputPlan:
        assessment = assess_consumer(window, watermark, now=now)
        return InputPlan(
            consumer,
            input_id,
            table,
            mode,
            watermark,
            latest,
            window.table_id,
            reason,
            problem,
            assessment,
        )

    problem: CdfPlatformError | None = None
    if full_requested is not None:
        return plan(BatchMode.FULL, full_requested)
    if marks_lost is not None:
        problem = ReplayWindowLost(marks_lost, pipeline_id=consumer, table=table)
    elif mark is None:
        return plan(BatchMode.FULL, "first read of this input")
    elif mark.table_id is not None and mark.table_id != window.table_id:
        problem = SourceReset(
            f"{input_id} was recreated: table id {window.table_id}, not {mark.table_id} as "
            f"when the watermark {mark.version} was taken",
            pipeline_id=consumer,
            table=table,
            version=mark.version,
        )
    elif mark.version > latest:
        problem = SourceReset(
            f"{input_id} is at version {latest}, below the consumer's watermark {mark.version}",
            pipeline_id=consumer,
            table=table,
            version=mark.version,
        )
    elif mark.version == latest:
        return plan(BatchMode.NOTHING_NEW)
    else:
        problem = replay_problem(consumer, table, window, mark.version + 1)
        if problem is None:
            return plan(BatchMode.INCREMENTAL)
    if isinstance(problem, REBUILDABLE):
        problem = problem.resolved_by(recompute_action(consumer))
    if not repair_decision(fallback, problem).automatic:
        raise problem
    return plan(BatchMode.FULL, str(problem), problem)
