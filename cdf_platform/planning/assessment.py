"""One assessment of a pipeline from the logs alone (no JVM): the run plan, `status` and the
Dagster checks are all derived from it, so they can never disagree.

The assessment reads bronze's log once (latest version, table id, exact replay window), silver's
log (owner and watermark) and the table id the control table recorded, and names the first
problem in the order a run meets them:

- blocking (a person must fix the input; a rebuild would not help;
  `cdf_platform.planning.blocking`): bronze missing (`SourceNotFound`), a target owned by
  another pipeline or holding other files (`TargetOwnershipConflict`), a bronze column named
  like one the platform adds (`InvalidPipelineSpec`), the change feed off before the first load
  (`CdfNotEnabled`);
- the replay window lost for this consumer (a rebuild repairs it;
  `cdf_platform.planning.lost_window`): bronze recreated or behind the watermark
  (`SourceReset`), then the first break of the window after the watermark
  (`ReplayWindowLost`, `IncompatibleSchemaChange`, `CdfNotEnabled`);
- the spec edited since silver was written (docs/design.md section 3a;
  `cdf_platform.planning.spec_edits`): a row-shaping field changed (`SpecChanged`, a rebuild
  reconciles or reshapes silver), or changed in a way silver cannot follow in place
  (`SpecChangeRefused`, blocking, checked before the window).

Example:
    >>> assessment = assess_pipeline(spec, known_source_id=None)  # doctest: +SKIP
    >>> assessment.problem is None, assessment.watermark  # doctest: +SKIP
    (True, 57)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from cdf_platform.core.errors import (
    CdfPlatformError,
    InvalidPipelineSpec,
    SpecChangeRefused,
)
from cdf_platform.core.spec.pipeline_spec import (
    PipelineSpec,
)
from cdf_platform.core.spec.spec_fingerprint import SpecChange, spec_record
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.planning.blocking import Blocked, source_window
from cdf_platform.planning.lost_window import lost_window_problem
from cdf_platform.planning.spec_edits import spec_change, spec_problem
from cdf_platform.state import catalog_names
from cdf_platform.state.control import ControlTable
from cdf_platform.state.verifications import last_verified_silver_versions
from cdf_platform.state.watermark import (
    ForwardOnly,
    SilverState,
    parse_spec_record,
    read_silver_state,
)
from cdf_platform.window.replay_window import (
    ConsumerAssessment,
    ReplayWindow,
    assess_consumer,
)


@dataclass(frozen=True)
class PipelineAssessment:
    """What the logs say about one pipeline at one instant.

    Attributes:
        spec: the pipeline (locations resolved).
        silver: silver's log (owner, watermark, generation).
        window: bronze's replay window (None when bronze is missing).
        consumer: lag and headroom of the watermark against the window (None likewise).
        problem: the first problem a run meets (see the module docstring), or None.
        blocking: whether `problem` needs a person (True) or a rebuild repairs it (False).
        spec_record: the current spec's row-shaping fields (`spec_record`), None when they
            were not computed (nothing read, or a transform that cannot be imported).
        spec_change: how the current spec differs from the one silver records, if it does:
            the next write reconciles or reshapes silver, or (`forward_only`) takes it for new
            changes only.
        forward_only: the edits silver took forward only since its last rebuild.
        spec_recorded: whether silver (or the control table's mirror) records a spec at all.
    """

    spec: PipelineSpec
    silver: SilverState
    window: ReplayWindow | None
    consumer: ConsumerAssessment | None
    problem: CdfPlatformError | None
    blocking: bool
    spec_record: dict[str, str] | None = None
    spec_change: SpecChange | None = None
    forward_only: ForwardOnly | None = None
    spec_recorded: bool = False

    @property
    def watermark(self) -> int | None:
        """The last bronze version applied to silver."""
        return self.silver.watermark

    @property
    def window_lost(self) -> bool:
        """Whether the consumer can no longer continue incrementally (a rebuild repairs it)."""
        return self.problem is not None and not self.blocking


def assess_pipeline(
    spec: PipelineSpec,
    *,
    known_source_id: str | None,
    followed_location: str | None = None,
    now: datetime | None = None,
    recorded_spec: dict[str, str] | None = None,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> PipelineAssessment:
    """Assess `spec` from bronze's and silver's logs (JVM-free; bronze's log is read once).

    Args:
        spec: the pipeline (locations resolved, catalog names located).
        known_source_id: the bronze table id the control table recorded, used when silver's
            recent log no longer holds it (the control state's `source_table_id`).
        followed_location: for a source given by catalog name, the location the watermark was
            taken at (see `cdf_platform.state.catalog_names.followed_location`).
        now: the clock for lag, headroom and the time-travel limit (default: current UTC time).
        recorded_spec: the spec record the control table mirrors, used when silver's recent
            log no longer holds one.
        storage: the lake's object-store options, to read both logs with (default: the
            environment's settings alone).
    """
    now = now or datetime.now(UTC)
    silver = read_silver_state(spec.target, spec.id, storage=storage)

    def blocked(
        problem: CdfPlatformError, window: ReplayWindow | None = None
    ) -> PipelineAssessment:
        consumer = assess_consumer(window, silver.watermark, now=now) if window else None
        return PipelineAssessment(spec, silver, window, consumer, problem, blocking=True)

    window = source_window(spec, silver, now, storage)
    if isinstance(window, Blocked):
        return blocked(window.problem, window.window)
    try:
        current = spec_record(spec)
    except InvalidPipelineSpec as err:
        return blocked(err, window)
    recorded = silver.spec_record or recorded_spec
    change, forward_only = spec_change(spec, silver, recorded, current)
    consumer = _consumer(spec, silver, window, now)

    def assessed(problem: CdfPlatformError | None, *, blocking: bool) -> PipelineAssessment:
        return PipelineAssessment(
            spec,
            silver,
            window,
            consumer,
            problem,
            blocking,
            current,
            change,
            forward_only,
            spec_recorded=recorded is not None,
        )

    edited = spec_problem(spec, change, forward_only)
    if isinstance(edited, SpecChangeRefused):
        return assessed(edited, blocking=True)
    problem = lost_window_problem(spec, silver, window, known_source_id, followed_location)
    # A rebuild for a lost window reconciles under the new spec too: the loss is the problem.
    return assessed(problem or edited, blocking=False)


def _consumer(
    spec: PipelineSpec, silver: SilverState, window: ReplayWindow, now: datetime
) -> ConsumerAssessment:
    """Lag and headroom of silver's watermark against bronze's replay window."""
    consumer = assess_consumer(window, silver.watermark, now=now)
    if not spec.changes.replays_history:
        # A snapshot source replays nothing: its next run reads bronze's latest version only,
        # so no window closes on it (no headroom, always replayable).
        consumer = replace(
            consumer, replayable=True, window_break=None, headroom_hours=None, deadlines=()
        )
    return consumer


@dataclass(frozen=True)
class ControlReads:
    """The control tables' rows a status needs, read once for many pipelines: each read
    returns every pipeline's row, so reading them per pipeline grows with the square of the
    fleet.

    Attributes:
        states: `ControlTable.read_states`.
        recorded: `ControlTable.read_locations` (empty before a run locates a catalog name).
        verified: the silver version each pipeline's newest settled verification vouches
            for (`last_verified_silver_versions`), where foreign-write searches start.
    """

    states: dict[str, dict[str, Any]]
    recorded: dict[str, dict[str, Any]]
    verified: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, control: ControlTable, *, verified: bool = True) -> ControlReads:
        """The rows, read from `control` now (without `verified`, the verification log is not
        read: for a caller that does not search for foreign writes)."""
        return cls(
            control.read_states(),
            control.read_locations(),
            last_verified_silver_versions(control) if verified else {},
        )


def assess_with_control(
    spec: PipelineSpec,
    control: ControlTable,
    *,
    now: datetime | None = None,
    reads: ControlReads | None = None,
) -> PipelineAssessment:
    """`assess_pipeline` of `spec` with its catalog names located, and the bronze table id and
    location `control` recorded for the pipeline.

    Args:
        reads: `control`'s rows, when the caller has read them for many pipelines (default:
            the rows this pipeline needs, read now).

    Raises:
        TableNameNotLocated: `spec` names a table no run has located yet.
    """
    located = catalog_names.locate(spec, control, recorded=reads.recorded if reads else None)
    state = (reads.states if reads else control.read_states()).get(spec.id)
    source_id = state.get("source_table_id") if state else None
    return assess_pipeline(
        located,
        known_source_id=str(source_id) if source_id else None,
        followed_location=catalog_names.followed_location(spec, state),
        now=now,
        recorded_spec=mirrored_spec_record(state),
        storage=control.storage,
    )


def mirrored_spec_record(state: dict[str, object] | None) -> dict[str, str] | None:
    """The spec record a control state row mirrors (column `spec_record`), if any."""
    raw = state.get("spec_record") if state else None
    if not isinstance(raw, str):
        return None
    try:
        return parse_spec_record(json.loads(raw))
    except ValueError:
        return None
