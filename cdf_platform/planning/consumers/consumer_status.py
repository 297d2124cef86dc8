"""A consumer asset's position against each of its inputs, from the logs alone (no JVM).

The consumer assets of the watermark IO manager keep one watermark per input in their own
table's log (`cdf_platform.state.consumer_marks`). Their checks show the same figures as a
pipeline's (`cdf_platform.planning.status.PipelineStatus`: lag in versions and hours, the
earliest replayable version, headroom), derived from the very plan the consumer's next read
would follow (`cdf_platform.planning.consumers.input_plan.plan_input`), so the checks and the
read never disagree:

- OK / LOW_HEADROOM: the next read is incremental (or nothing new), with that much headroom;
- NOT_STARTED: the consumer never read this input (its first read is a full one);
- LOST: the next read cannot be incremental (the window is lost, the input was recreated, or
  the consumer's watermarks are gone from its log): a full recompute repairs it;
- SOURCE_MISSING: the input table does not exist.

Example:
    >>> status = input_status(ConsumerInput("gold/revenue", "/lake/gold/revenue",
    ...     "silver/orders", "/lake/silver/orders"), limits)  # doctest: +SKIP
    >>> status.state, status.version_lag  # doctest: +SKIP
    (<WindowState.OK: 'OK'>, 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cdf_platform.core.errors import SourceNotFound
from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.core.storage import StorageConfig
from cdf_platform.planning.consumers.input_plan import BatchMode, plan_input
from cdf_platform.planning.status import (
    PipelineStatus,
    WindowState,
    headroom_of,
    shown_headroom,
)
from cdf_platform.state.consumer_marks import ConsumerMarks, MarksLost, read_consumer_marks
from cdf_platform.window.replay_window import compute_replay_window

_HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class ConsumerInput:
    """One input of a consumer asset, located.

    Attributes:
        consumer: The consumer's id (its asset key, e.g. `gold/revenue`).
        consumer_table: The consumer's Delta table (where its watermarks live).
        input_id: The input's id (its asset key, e.g. `silver/orders`).
        input_table: The input's Delta table.
    """

    consumer: str
    consumer_table: str
    input_id: str
    input_table: str


def read_marks(
    consumer: str, consumer_table: str, storage: StorageConfig
) -> tuple[ConsumerMarks | None, str | None]:
    """The consumer's watermarks, or why its log no longer holds them (its table read with the
    lake's object-store options, `storage`)."""
    try:
        return read_consumer_marks(consumer_table, consumer, storage=storage), None
    except MarksLost as err:
        return None, err.problem


def input_status(
    read: ConsumerInput,
    *,
    min_headroom_hours: float,
    max_allowed_lag_hours: float,
    storage: StorageConfig,
    marks: tuple[ConsumerMarks | None, str | None] | None = None,
    now: datetime | None = None,
) -> PipelineStatus:
    """The consumer's status on one input (module doc for the states).

    Args:
        read: The consumer and input, located.
        min_headroom_hours: Below this headroom the state is LOW_HEADROOM.
        max_allowed_lag_hours: Above this lag `lag_exceeded` is set.
        storage: The lake's object-store options, to read the tables with.
        marks: The consumer's watermarks as `read_marks` returns them (read here if None).
        now: The clock (default: now, UTC).
    """
    if marks is None:
        marks = read_marks(read.consumer, read.consumer_table, storage)
    found, lost = marks
    try:
        window = compute_replay_window(read.input_table, now=now, storage=storage)
    except SourceNotFound as err:
        return PipelineStatus.without_figures(
            read.consumer, WindowState.SOURCE_MISSING, err.incident_code, str(err)
        )
    plan = plan_input(
        read.consumer,
        read.input_id,
        read.input_table,
        found,
        # The status must not raise where a FAIL_FAST read would: it reports the loss.
        FallbackMode.SNAPSHOT_REBUILD,
        marks_lost=lost,
        window=window,
        now=now,
    )
    consumer = plan.assessment
    problem = plan.problem
    if problem is not None:
        state = WindowState.LOST
    elif plan.mode is BatchMode.FULL:
        state = WindowState.NOT_STARTED
    elif (headroom := headroom_of(consumer)) is not None and headroom < min_headroom_hours:
        state = WindowState.LOW_HEADROOM
    else:
        state = WindowState.OK
    lag_hours = consumer.lag_hours if consumer is not None else None
    horizon = min(window.deleted_file_retention, window.log_retention) / _HOUR
    return PipelineStatus(
        pipeline_id=read.consumer,
        watermark=plan.watermark,
        latest_version=window.latest_version,
        version_lag=consumer.version_lag if consumer is not None else None,
        data_version_lag=consumer.data_version_lag if consumer is not None else None,
        lag_hours=lag_hours,
        earliest_replayable_version=window.earliest_replayable_version,
        replayable=problem is None and consumer is not None and consumer.replayable,
        headroom_hours=shown_headroom(consumer, state, horizon),
        retention_horizon_hours=horizon,
        state=state,
        lag_exceeded=lag_hours is not None and lag_hours > max_allowed_lag_hours,
        problem_code=problem.incident_code if problem is not None else None,
        problem=str(problem) if problem is not None else None,
    )
