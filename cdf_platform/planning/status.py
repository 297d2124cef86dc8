"""Per-pipeline status from the logs alone (no JVM): watermark, lag, replay window, headroom.

This is what `cdf-platform status` prints and what the Dagster checks evaluate.

Example:
    >>> pipeline_status(spec).as_dict()["version_lag"]  # doctest: +SKIP
    3
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.core.spec import PipelineSpec
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.planning.plan import reset_problem, window_problem
from cdf_platform.state.watermark import read_silver_state
from cdf_platform.window.replay_window import assess_consumer, compute_replay_window


class WindowState(StrEnum):
    """Replay-window verdict for one pipeline."""

    OK = "OK"
    LOW_HEADROOM = "LOW_HEADROOM"
    LOST = "LOST"
    NOT_STARTED = "NOT_STARTED"
    SOURCE_MISSING = "SOURCE_MISSING"


@dataclass(frozen=True)
class PipelineStatus:
    """One pipeline's position against its bronze source."""

    pipeline_id: str
    watermark: int | None
    latest_version: int | None
    version_lag: int | None
    data_version_lag: int | None
    lag_hours: float | None
    earliest_replayable_version: int | None
    replayable: bool
    headroom_hours: float | None
    state: WindowState
    lag_exceeded: bool
    problem_code: str | None
    problem: str | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        data = asdict(self)
        data["state"] = self.state.value
        for name in ("lag_hours", "headroom_hours"):
            if data[name] is not None:
                data[name] = round(float(data[name]), 3)
        return data


def pipeline_status(spec: PipelineSpec, *, now: datetime | None = None) -> PipelineStatus:
    """Compute `spec`'s status from bronze's and silver's logs (JVM-free)."""
    now = now or datetime.now(UTC)
    if not is_delta_table(spec.source):
        return PipelineStatus(
            spec.id,
            None,
            None,
            None,
            None,
            None,
            None,
            False,
            None,
            WindowState.SOURCE_MISSING,
            False,
            "SOURCE_NOT_FOUND",
            f"no Delta table at {spec.source}",
        )
    silver = read_silver_state(spec.target, spec.id)
    window = compute_replay_window(spec.source, now=now)
    assessment = assess_consumer(window, silver.watermark, now=now)
    problem: CdfPlatformError | None = reset_problem(spec, silver, window, None)
    if (
        problem is None
        and silver.watermark is not None
        and silver.watermark < window.latest_version
    ):
        problem = window_problem(spec, window, silver.watermark + 1)
    if silver.watermark is None:
        state = WindowState.NOT_STARTED
    elif problem is not None:
        state = WindowState.LOST
    elif (
        assessment.headroom_hours is not None
        and assessment.headroom_hours < spec.min_headroom_hours
    ):
        state = WindowState.LOW_HEADROOM
    else:
        state = WindowState.OK
    lag_hours = assessment.lag_hours
    return PipelineStatus(
        pipeline_id=spec.id,
        watermark=silver.watermark,
        latest_version=window.latest_version,
        version_lag=assessment.version_lag,
        data_version_lag=assessment.data_version_lag,
        lag_hours=lag_hours,
        earliest_replayable_version=window.earliest_replayable_version,
        replayable=problem is None and assessment.replayable,
        headroom_hours=assessment.headroom_hours,
        state=state,
        lag_exceeded=lag_hours is not None and lag_hours > spec.max_allowed_lag_hours,
        problem_code=problem.incident_code if problem else None,
        problem=str(problem) if problem else None,
    )
