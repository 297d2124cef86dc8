"""What one pipeline run did: the result handed to logs, Dagster metadata and the CLI, with the
seconds of each of its stages (`stage_<stage>_seconds`: queue, launch, plan, read, merge, end;
`cdf_platform.state.load_log`).

Example:
    >>> result.as_metadata()["mode"]  # doctest: +SKIP
    'incremental'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cdf_platform.core.spec.expectations import ExpectationCounts
from cdf_platform.planning.plan import RunMode
from cdf_platform.state.load_log import STAGES, RunStages
from cdf_platform.window.replay_window import ConsumerAssessment


@dataclass(frozen=True)
class RowCounts:
    """The silver rows one commit inserted, updated and deleted (a soft delete counts as
    deleted)."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0


NO_ROWS = RowCounts()


@dataclass(frozen=True)
class RunResult:
    """What one pipeline run did, for logs, Dagster metadata and the CLI; `stages`: its marks,
    from the orchestrator's creating it to its load-log row; `overridden_by`: who let it
    rebuild a FAIL_FAST pipeline without the review (the audit record's `permitted_by`), if it
    did (`cdf_platform.run.rebuild_policy`)."""

    pipeline_id: str
    run_id: str
    mode: RunMode
    start_version: int | None
    end_version: int | None
    watermark_before: int | None
    watermark_after: int | None
    rows_inserted: int
    rows_updated: int
    rows_deleted: int
    duration_seconds: float
    spark_started: bool
    lag_before: ConsumerAssessment
    lag_after: ConsumerAssessment
    incident_code: str | None = None
    incident_message: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    expectations: ExpectationCounts | None = None
    stages: RunStages | None = None
    overridden_by: str | None = None

    def as_metadata(self) -> dict[str, Any]:
        """Flat figures for Dagster metadata and JSON output."""
        return {
            "pipeline_id": self.pipeline_id,
            "run_id": self.run_id,
            "mode": self.mode.value,
            "start_version": self.start_version,
            "end_version": self.end_version,
            "watermark_before": self.watermark_before,
            "watermark_after": self.watermark_after,
            "rows_inserted": self.rows_inserted,
            "rows_updated": self.rows_updated,
            "rows_deleted": self.rows_deleted,
            "duration_seconds": round(self.duration_seconds, 3),
            "spark_started": self.spark_started,
            "version_lag_before": self.lag_before.version_lag,
            "lag_hours_before": self.lag_before.lag_hours,
            "version_lag_after": self.lag_after.version_lag,
            "lag_hours_after": self.lag_after.lag_hours,
            "incident_code": self.incident_code,
            **{f"{name}_seconds": round(value, 3) for name, value in self.timings.items()},
            **self._expectation_figures(),
            **self._stage_figures(),
        }

    def _stage_figures(self) -> dict[str, float | None]:
        """Seconds of each stage of the run (`stage_<stage>_seconds`; None: a stage it has not)."""
        seconds: dict[str, float | None]
        if self.stages is None:
            seconds = {stage: None for stage, _ in STAGES if stage != "tick_wait"}
        else:
            seconds = self.stages.seconds()
        return {
            f"stage_{stage}_seconds": None if value is None else round(value, 3)
            for stage, value in seconds.items()
        }

    def _expectation_figures(self) -> dict[str, Any]:
        """Rows judged, and each rule's failing rows (`expectation_<name>_failing`)."""
        if self.expectations is None:
            return {}
        return {
            "expectations_judged": self.expectations.judged,
            **{
                f"expectation_{name}_failing": count
                for name, count in self.expectations.failing.items()
            },
        }
