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
- the replay window lost for this consumer (a rebuild repairs it): bronze recreated or behind
  the watermark (`SourceReset`), then the first break of the window after the watermark
  (`ReplayWindowLost`, `IncompatibleSchemaChange`, `CdfNotEnabled`);
- the spec edited since silver was written (docs/design.md section 3a): a row-shaping field
  changed (`SpecChanged`, a rebuild reconciles or reshapes silver), or changed in a way silver
  cannot follow in place (`SpecChangeRefused`, blocking, checked before the window).

Example:
    >>> assessment = assess_pipeline(spec, known_source_id=None)  # doctest: +SKIP
    >>> assessment.problem is None, assessment.watermark  # doctest: +SKIP
    (True, 57)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from cdf_platform.core import errors
from cdf_platform.core.errors import (
    CdfNotEnabled,
    CdfPlatformError,
    IncompatibleSchemaChange,
    InvalidPipelineSpec,
    ReplayWindowLost,
    SourceReset,
    SpecChanged,
    SpecChangeRefused,
)
from cdf_platform.core.spec import (
    FallbackMode,
    HistoryMode,
    OnSpecChange,
    PipelineSpec,
)
from cdf_platform.core.spec_fingerprint import SpecChange, compare_spec, spec_record
from cdf_platform.core.storage_options import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.planning.blocking import Blocked, source_window
from cdf_platform.state import locations
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import (
    ForwardOnly,
    SilverState,
    parse_spec_record,
    read_silver_state,
)
from cdf_platform.window.replay_window import (
    ConsumerAssessment,
    ReplayWindow,
    WindowBreakKind,
    assess_consumer,
)

# Problems a snapshot rebuild repairs (when the pipeline's fallback allows it).
# Re-exported: the runner's name for what a rebuild repairs.
REBUILDABLE = errors.REBUILDABLE


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


def window_problem(spec: PipelineSpec, window: ReplayWindow, start: int) -> CdfPlatformError | None:
    """The classified reason a CDF read of [start, L] cannot give every change, or None; a lost
    window names the repair its `fallback_mode` gives it."""
    problem = replay_problem(spec.id, spec.source, window, start, table_role="bronze")
    if isinstance(problem, ReplayWindowLost):
        problem.resolved_by(lost_window_action(spec))
    return problem


def lost_window_action(spec: PipelineSpec) -> str:
    """What repairs `spec`'s lost window: the sensors' one rebuild (SNAPSHOT_REBUILD), or a
    person's (FAIL_FAST); then a retention that covers the pause."""
    after = (
        "then raise delta.deletedFileRetentionDuration on the source above the consumer's "
        "longest pause"
    )
    if spec.fallback_mode is FallbackMode.FAIL_FAST:
        return (
            "FAIL_FAST: read the incident, then rebuild silver from a pinned bronze snapshot by "
            f"hand (`cdf-platform rebuild {spec.id}`, or rebuild_job with `override_fail_fast: "
            f"true` where the deployment permits it); {after}"
        )
    return (
        "SNAPSHOT_REBUILD: the platform repairs it with one rebuild of silver from a pinned "
        "bronze snapshot (the sensors request it within a tick; `cdf-platform run` falls back "
        f"to it; `cdf-platform rebuild {spec.id}` does it by hand); {after}"
    )


def replay_problem(
    consumer: str, table: str, window: ReplayWindow, start: int, *, table_role: str = "input"
) -> CdfPlatformError | None:
    """The classified reason a CDF read of `table` over [start, L] for `consumer` (a pipeline
    or a consumer asset) cannot give every change, or None."""
    found = window.break_for_consumer(start - 1)
    if found is None:
        return None
    latest = window.latest_version
    what = f"{table_role} versions {start}..{latest} cannot be replayed: {found.detail}"
    kind: type[CdfPlatformError] = ReplayWindowLost
    if found.kind is WindowBreakKind.SCHEMA_CHANGE:
        kind = IncompatibleSchemaChange
    elif found.kind is WindowBreakKind.CDF_DISABLED:
        kind = CdfNotEnabled
    elif (earliest := window.earliest_replayable_version) > start:
        # Where the window starts now, and which of the versions needed have left it.
        last_gone = min(earliest - 1, latest)
        gone = f"version {start}" if last_gone <= start else f"versions {start}..{last_gone}"
        what += f"; the replay window now starts at version {earliest}: {gone} left it"
    return kind(what, pipeline_id=consumer, table=table, version=found.version)


def reset_problem(
    spec: PipelineSpec,
    silver: SilverState,
    window: ReplayWindow,
    known_source_id: str | None,
    followed_location: str | None = None,
) -> SourceReset | None:
    """Bronze's catalog name now at another location than the watermark was taken at, bronze
    recreated (another table id than silver or the control table recorded) or its latest
    version below the watermark, or None."""
    watermark = silver.watermark
    if (
        watermark is not None
        and followed_location is not None
        and followed_location.rstrip("/") != spec.source.rstrip("/")
    ):
        return SourceReset(
            f"the source's catalog name now points at {spec.source}, not at {followed_location} "
            "where the watermark was taken (the table was dropped and recreated, or moved)",
            pipeline_id=spec.id,
            table=spec.source,
            version=watermark,
        )
    recorded = silver.source_table_id or known_source_id
    if watermark is not None and recorded is not None and recorded != window.table_id:
        return SourceReset(
            f"bronze table id changed from {recorded} to {window.table_id} (the table was "
            "recreated); the watermark no longer refers to this table",
            pipeline_id=spec.id,
            table=spec.source,
            version=watermark,
        )
    if watermark is not None and window.latest_version < watermark:
        return SourceReset(
            f"bronze latest version {window.latest_version} is below the watermark {watermark}",
            pipeline_id=spec.id,
            table=spec.source,
            version=watermark,
        )
    return None


def spec_problem(
    spec: PipelineSpec, change: SpecChange | None, forward_only: ForwardOnly | None
) -> CdfPlatformError | None:
    """What the spec edit `change` (and edits taken forward only before) ask of the next run:
    `SpecChangeRefused` (blocking) where silver cannot follow, `SpecChanged` where a rebuild
    reconciles or reshapes it, None where the edit applies forward only or nothing changed."""
    if change is not None and change.reshapes:
        if spec.on_spec_change is OnSpecChange.FORWARD_ONLY:
            return SpecChangeRefused(
                f"{change.describe()}; `on_spec_change: forward_only` cannot apply a change of "
                "keys, history or delete mode (old and new rows would be of two shapes)",
                pipeline_id=spec.id,
                table=spec.target,
            )
        if spec.history is HistoryMode.SCD2:
            return SpecChangeRefused(
                f"{change.describe()}; an SCD2 history cannot be rewritten into another shape "
                "from one snapshot (its closed versions would be lost)",
                pipeline_id=spec.id,
                table=spec.target,
                action=(
                    f"move the silver table at {spec.target} away (rename its folder, or drop "
                    f"the table) and run `cdf-platform rebuild {spec.id}`, or restore the "
                    "previous spec"
                ),
            )
        return _spec_changed(
            spec, f"{change.describe()}: the next run rewrites silver in the new shape"
        )
    if spec.on_spec_change is not OnSpecChange.RECONCILE:
        return None
    if change is not None:
        return _spec_changed(spec, f"{change.describe()}: the next run reconciles silver")
    if forward_only is not None:
        return _spec_changed(
            spec,
            f"silver took edits of {', '.join(forward_only.fields)} forward only since bronze "
            f"version {forward_only.since}, and the pipeline now asks to reconcile: the next run "
            "reconciles silver",
        )
    return None


def forward_only_after(
    watermark: int | None, change: SpecChange | None, held: ForwardOnly | None
) -> ForwardOnly | None:
    """The forward-only record silver holds once an incremental run at `watermark` takes the
    edit `change` forward only: `held`, widened by the edit's fields (or a new one since
    `watermark`)."""
    if change is None:
        return held
    if held is None:
        return ForwardOnly(watermark, change.fields, change.recorded)
    fields = tuple(dict.fromkeys((*held.fields, *change.fields)))
    return ForwardOnly(held.since, fields, held.from_fingerprint)


def _spec_changed(spec: PipelineSpec, what: str) -> SpecChanged:
    """A pending spec edit of `spec`, with what resolves it: the run itself, or a person's
    rebuild (FAIL_FAST)."""
    rebuild = (
        f"run `cdf-platform rebuild {spec.id}` (or the rebuild job with `override_fail_fast: true`)"
        if spec.fallback_mode is FallbackMode.FAIL_FAST
        else f"run the pipeline (`cdf-platform run {spec.id}`, or its silver asset)"
    )
    return SpecChanged(
        f"{what} from a pinned bronze snapshot under the new spec",
        pipeline_id=spec.id,
        table=spec.target,
        action=(
            f"{rebuild} to bring silver to the new spec from a pinned bronze snapshot; or set "
            "`on_spec_change: forward_only` to apply a `where`/`columns`-like edit to new "
            "changes only; or restore the previous spec"
        ),
    )


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
            taken at (see `cdf_platform.state.locations.followed_location`).
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
    change, forward_only = _spec_change(spec, silver, recorded, current)
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
    problem = _lost_window_problem(spec, silver, window, known_source_id, followed_location)
    # A rebuild for a lost window reconciles under the new spec too: the loss is the problem.
    return assessed(problem or edited, blocking=False)


def _spec_change(
    spec: PipelineSpec,
    silver: SilverState,
    recorded: dict[str, str] | None,
    current: dict[str, str],
) -> tuple[SpecChange | None, ForwardOnly | None]:
    """How `spec` (its record `current`) differs from the spec silver was written under
    (`recorded`), and the edits silver took forward only; neither before the first load."""
    if silver.watermark is None:
        return None, None
    change = compare_spec(recorded, current)
    if change is not None and spec.history is HistoryMode.SCD2 and "sequence_by" in change.fields:
        # An SCD2 history is dated by its sequence column: another one is another shape.
        change = replace(change, fields=tuple(dict.fromkeys((*change.fields, "history"))))
    return change, silver.forward_only


def _consumer(
    spec: PipelineSpec, silver: SilverState, window: ReplayWindow, now: datetime
) -> ConsumerAssessment:
    """Lag and headroom of silver's watermark against bronze's replay window."""
    consumer = assess_consumer(window, silver.watermark, now=now)
    if spec.snapshot_source:
        # A snapshot source replays nothing: its next run reads bronze's latest version only,
        # so no window closes on it (no headroom, always replayable).
        consumer = replace(
            consumer, replayable=True, window_break=None, headroom_hours=None, deadlines=()
        )
    return consumer


def _lost_window_problem(
    spec: PipelineSpec,
    silver: SilverState,
    window: ReplayWindow,
    known_source_id: str | None,
    followed_location: str | None,
) -> CdfPlatformError | None:
    """What a rebuild repairs: bronze reset, else the first break of the replay window after
    the watermark (a snapshot source has no window to break); None when neither."""
    problem: CdfPlatformError | None = reset_problem(
        spec, silver, window, known_source_id, followed_location
    )
    if (
        problem is None
        and not spec.snapshot_source
        and silver.watermark is not None
        and silver.watermark < window.latest_version
    ):
        problem = window_problem(spec, window, silver.watermark + 1)
    return problem


@dataclass(frozen=True)
class ControlReads:
    """The control tables' rows a status needs, read once for many pipelines: each read
    returns every pipeline's row, so reading them per pipeline grows with the square of the
    fleet.

    Attributes:
        states: `ControlTable.read_states`.
        recorded: `ControlTable.read_locations` (empty before a run locates a catalog name).
    """

    states: dict[str, dict[str, Any]]
    recorded: dict[str, dict[str, Any]]

    @classmethod
    def of(cls, control: ControlTable) -> ControlReads:
        """The rows, read from `control` now."""
        return cls(control.read_states(), control.read_locations())


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
    located = locations.locate(spec, control, recorded=reads.recorded if reads else None)
    state = (reads.states if reads else control.read_states()).get(spec.id)
    source_id = state.get("source_table_id") if state else None
    return assess_pipeline(
        located,
        known_source_id=str(source_id) if source_id else None,
        followed_location=locations.followed_location(spec, state),
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
