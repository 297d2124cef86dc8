"""Per-pipeline status from the logs alone (no JVM): watermark, lag, replay window, headroom.

This is what `cdf-platform status` prints and what the Dagster checks evaluate; it is derived
from the same assessment a run plans from (`cdf_platform.planning.assessment`).

Example:
    >>> control = ControlTable("/lake/_control")
    >>> pipeline_status(spec, control).as_dict()["version_lag"]  # doctest: +SKIP
    3
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from cdf_platform.core.errors import (
    SourceNotFound,
    SpecChanged,
    SpecChangeRefused,
    TableNameNotLocated,
)
from cdf_platform.core.spec.modes import OnSpecChange
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import fingerprint_of
from cdf_platform.planning.assessment import (
    ControlReads,
    PipelineAssessment,
    assess_with_control,
)
from cdf_platform.planning.foreign_writes import (
    ForeignWrite,
    ForeignWrites,
    find_foreign_writes,
    summarize,
)
from cdf_platform.planning.spec_edits import forward_only_after
from cdf_platform.state.control import ControlTable
from cdf_platform.state.verifications import last_verified_silver_version
from cdf_platform.window.replay_window import ConsumerAssessment

_HOUR = timedelta(hours=1)


class WindowState(StrEnum):
    """Replay-window verdict for one pipeline."""

    OK = "OK"
    LOW_HEADROOM = "LOW_HEADROOM"
    LOST = "LOST"
    NOT_STARTED = "NOT_STARTED"
    SOURCE_MISSING = "SOURCE_MISSING"
    # A problem a person must fix (target owned by another pipeline, a bronze column named like
    # a platform column, the change feed off before the first load, a spec edit silver cannot
    # follow in place): runs fail until then.
    BLOCKED = "BLOCKED"
    # The spec's row-shaping fields changed since silver was written: the next run reconciles
    # (or reshapes) silver, or refuses under FAIL_FAST.
    SPEC_CHANGED = "SPEC_CHANGED"


class SpecState(StrEnum):
    """Whether silver is its current spec applied to bronze (docs/design.md section 3a)."""

    OK = "OK"
    """Silver records the current spec."""
    CHANGED = "CHANGED"
    """A row-shaping field changed: the next run reconciles or reshapes silver."""
    REFUSED = "REFUSED"
    """A change silver cannot follow in place: a person moves silver away or restores it."""
    FORWARD_ONLY = "FORWARD_ONLY"
    """Edits applied to new changes only (`on_spec_change: forward_only`): older rows keep the
    previous spec's values until the next rebuild."""
    UNRECORDED = "UNRECORDED"
    """Silver's log holds no spec record (written before records were kept): the next write
    records the current spec."""


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
    retention_horizon_hours: float | None
    state: WindowState
    lag_exceeded: bool
    problem_code: str | None
    problem: str | None
    spec_state: SpecState | None = None
    spec_changed_fields: tuple[str, ...] = ()
    spec_fingerprint: str | None = None
    foreign_writes: tuple[ForeignWrite, ...] = ()
    foreign_writes_baseline: str | None = None
    foreign_writes_note: str | None = None

    @property
    def foreign_writes_summary(self) -> str | None:
        """`v12 UPDATE, v13 DELETE`: silver's foreign writes since the baseline, or None."""
        return summarize(self.foreign_writes)

    @classmethod
    def without_figures(
        cls, pipeline_id: str, state: WindowState, problem_code: str | None, problem: str | None
    ) -> PipelineStatus:
        """A status with no bronze or silver figure to show (nothing could be read)."""
        return cls(
            pipeline_id=pipeline_id,
            watermark=None,
            latest_version=None,
            version_lag=None,
            data_version_lag=None,
            lag_hours=None,
            earliest_replayable_version=None,
            replayable=False,
            headroom_hours=None,
            retention_horizon_hours=None,
            state=state,
            lag_exceeded=False,
            problem_code=problem_code,
            problem=problem,
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        data = asdict(self)
        data["state"] = self.state.value
        data["spec_state"] = self.spec_state.value if self.spec_state is not None else None
        data["spec_changed_fields"] = list(self.spec_changed_fields)
        data["foreign_writes"] = [w.as_dict() for w in self.foreign_writes]
        data["foreign_writes_summary"] = self.foreign_writes_summary
        for name in ("lag_hours", "headroom_hours", "retention_horizon_hours"):
            if data[name] is not None:
                data[name] = round(float(data[name]), 3)
        return data


def headroom_of(consumer: ConsumerAssessment | None) -> float | None:
    """The deadline headroom: hours until W + 1 leaves the replay window; 0 once it has (a lost
    window); None while nothing waits to be replayed (caught up, or never ran). The state is
    judged by it: a caught-up consumer is never LOW_HEADROOM."""
    if consumer is None or consumer.headroom_hours is None:
        return None
    return max(0.0, consumer.headroom_hours)


def shown_headroom(
    consumer: ConsumerAssessment | None, state: WindowState, horizon: float | None
) -> float | None:
    """The headroom every view shows (`status`, the checks' plots, `platform/pipelines`): the
    deadline's (`headroom_of`) while one runs; 0 once the window is lost; for a caught-up
    consumer the retention horizon, the headroom bronze's next commit starts with (W + 1 is
    that commit, and nothing can leave the window before it exists); None where there is no
    figure (never ran, no bronze table)."""
    if (deadline := headroom_of(consumer)) is not None:
        return deadline
    if state is WindowState.LOST:
        return 0.0
    if consumer is not None and consumer.version_lag == 0:
        return horizon
    return None


def status_from(found: PipelineAssessment, foreign: ForeignWrites | None = None) -> PipelineStatus:
    """The status an assessment shows (see `WindowState` for the states), with the foreign
    writes found on silver (`find_foreign_writes`), if searched."""
    spec, window, consumer, problem = found.spec, found.window, found.consumer, found.problem
    if isinstance(problem, SourceNotFound):
        state = WindowState.SOURCE_MISSING
    elif problem is not None and found.blocking:
        state = WindowState.BLOCKED
    elif found.watermark is None:
        state = WindowState.NOT_STARTED
    elif isinstance(problem, SpecChanged):
        state = WindowState.SPEC_CHANGED
    elif problem is not None:
        state = WindowState.LOST
    elif (headroom := headroom_of(consumer)) is not None and headroom < spec.min_headroom_hours:
        state = WindowState.LOW_HEADROOM
    else:
        state = WindowState.OK
    lag_hours = consumer.lag_hours if consumer else None
    horizon = min(window.deleted_file_retention, window.log_retention) / _HOUR if window else None
    replays = spec.changes.replays_history
    return PipelineStatus(
        pipeline_id=spec.id,
        watermark=found.watermark,
        latest_version=window.latest_version if window else None,
        version_lag=consumer.version_lag if consumer else None,
        data_version_lag=consumer.data_version_lag if consumer else None,
        lag_hours=lag_hours,
        # A snapshot source replays no history: no version of its window is the start of a run
        # (the change feed may be off, which would put E past the latest version), and it has
        # no headroom.
        earliest_replayable_version=(
            window.earliest_replayable_version if window and replays else None
        ),
        replayable=problem is None and consumer is not None and consumer.replayable,
        headroom_hours=shown_headroom(consumer, state, horizon) if replays else None,
        retention_horizon_hours=horizon,
        state=state,
        lag_exceeded=lag_hours is not None and lag_hours > spec.max_allowed_lag_hours,
        problem_code=problem.incident_code if problem else None,
        problem=str(problem) if problem else None,
        **_spec_figures(found),
        **_foreign_figures(foreign),
    )


def _foreign_figures(foreign: ForeignWrites | None) -> dict[str, Any]:
    """The foreign writes, the baseline searched after and what the search could not see."""
    if foreign is None:
        return {}
    baseline = foreign.baseline.value
    if foreign.baseline_version is not None:
        baseline += f" v{foreign.baseline_version}"
    return {
        "foreign_writes": foreign.writes,
        "foreign_writes_baseline": baseline,
        "foreign_writes_note": foreign.note,
    }


def _spec_figures(found: PipelineAssessment) -> dict[str, Any]:
    """`spec_state`, the fields that differ and the current fingerprint of an assessment."""
    if found.watermark is None or found.spec_record is None:
        return {}
    change, forward = found.spec_change, found.forward_only
    fields: tuple[str, ...] = change.fields if change is not None else ()
    if isinstance(found.problem, SpecChangeRefused):
        state = SpecState.REFUSED
    elif change is not None and found.spec.on_spec_change is OnSpecChange.FORWARD_ONLY:
        state = SpecState.FORWARD_ONLY
        after = forward_only_after(found.watermark, change, forward)
        fields = after.fields if after is not None else fields
    elif change is not None or (forward is not None and isinstance(found.problem, SpecChanged)):
        state = SpecState.CHANGED
        fields = fields or (forward.fields if forward else ())
    elif forward is not None:
        state, fields = SpecState.FORWARD_ONLY, forward.fields
    elif not found.spec_recorded:
        state = SpecState.UNRECORDED
    else:
        state = SpecState.OK
    return {
        "spec_state": state,
        "spec_changed_fields": fields,
        "spec_fingerprint": fingerprint_of(found.spec_record),
    }


def pipeline_status(
    spec: PipelineSpec,
    control: ControlTable,
    *,
    now: datetime | None = None,
    reads: ControlReads | None = None,
) -> PipelineStatus:
    """Compute `spec`'s status from bronze's and silver's logs and the table id `control`
    recorded (JVM-free; `reads`: its rows read already, see `ControlReads`): the assessment a
    run of `spec` would plan from. A pipeline naming a table no run has located yet is
    NOT_STARTED, with the reason as its problem."""
    return status_and_assessment(spec, control, now=now, reads=reads)[0]


def pipeline_statuses(
    specs: Sequence[PipelineSpec], control: ControlTable, *, now: datetime | None = None
) -> list[PipelineStatus]:
    """`pipeline_status` of every spec (in their order), reading `control`'s tables once.

    A read of the state table returns every pipeline's row (a row, and a data file, per
    pipeline), so one read per pipeline grows with the square of the fleet: about 5 minutes
    for 500 pipelines, against half a second for the one read here.
    """
    reads = ControlReads.of(control)
    return [status_and_assessment(spec, control, now=now, reads=reads)[0] for spec in specs]


def status_and_assessment(
    spec: PipelineSpec,
    control: ControlTable,
    *,
    now: datetime | None = None,
    reads: ControlReads | None = None,
    foreign_writes: bool = True,
) -> tuple[PipelineStatus, PipelineAssessment | None]:
    """`pipeline_status` with the assessment it was derived from (None for a pipeline whose
    tables are not located yet), for a caller that also plans from it; `reads` are `control`'s
    rows when the caller has read them for many pipelines (`ControlReads`). Without
    `foreign_writes` silver's log is not searched for them (a caller that only plans runs,
    which foreign writes do not change): the status lists none."""
    try:
        found = assess_with_control(spec, control, now=now, reads=reads)
    except TableNameNotLocated as err:
        status = PipelineStatus.without_figures(
            spec.id, WindowState.NOT_STARTED, err.incident_code, str(err)
        )
        return status, None
    foreign = _foreign_writes(found, control, reads) if foreign_writes else None
    return status_from(found, foreign), found


def _foreign_writes(
    found: PipelineAssessment, control: ControlTable, reads: ControlReads | None
) -> ForeignWrites | None:
    """Silver's foreign writes since the last verified version or rebuild (None: no silver)."""
    spec = found.spec
    if not found.silver.exists or found.silver.owner != spec.id:
        return None  # no silver, or another's (blocked): none of its commits are this one's
    verified = (
        reads.verified.get(spec.id) if reads else last_verified_silver_version(control, spec.id)
    )
    return find_foreign_writes(spec.target, spec.id, verified=verified, storage=control.storage)
