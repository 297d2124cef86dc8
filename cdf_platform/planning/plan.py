"""Planning a pipeline run without a JVM: what mode, which pinned range, and what is wrong.

The plan reads bronze's log (latest version, table id, exact replay window) and silver's log
(the watermark), and decides: no-op, initial load, incremental, or a rebuild that the
pipeline's fallback policy must allow. Nothing is read through Spark and nothing is written.

Example:
    >>> plan = plan_run(spec)  # doctest: +SKIP
    >>> plan.mode, plan.start_version, plan.end_version  # doctest: +SKIP
    (<RunMode.INCREMENTAL: 'incremental'>, 43, 57)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from cdf_platform.core.errors import (
    CdfNotEnabled,
    CdfPlatformError,
    IncompatibleSchemaChange,
    InvalidPipelineSpec,
    ReplayWindowLost,
    SourceNotFound,
    SourceReset,
    TargetOwnershipConflict,
    foreign_files_at_target,
)
from cdf_platform.core.spec import CDF_COLUMNS, RESERVED_COLUMNS, PipelineSpec
from cdf_platform.deltalog.tables import holds_foreign_files, is_delta_table
from cdf_platform.state.watermark import SilverState, read_silver_state
from cdf_platform.window.replay_window import (
    ConsumerAssessment,
    ReplayWindow,
    WindowBreakKind,
    assess_consumer,
    compute_replay_window,
)


class RunMode(StrEnum):
    """What a pipeline run does."""

    NOOP = "noop"
    INCREMENTAL = "incremental"
    INITIAL_LOAD = "initial_load"
    REBUILD = "rebuild"


@dataclass(frozen=True)
class RunPlan:
    """The decision for one run, made from the logs alone.

    Attributes:
        mode: what the run does (REBUILD only when `problem` is set or one is asked for).
        start_version / end_version: the pinned bronze range (incremental) or snapshot version.
        problem: the classified reason the incremental path cannot run, if any.
    """

    spec: PipelineSpec
    mode: RunMode
    silver: SilverState
    window: ReplayWindow
    assessment: ConsumerAssessment
    start_version: int | None
    end_version: int
    problem: CdfPlatformError | None = None

    @property
    def watermark(self) -> int | None:
        """The watermark before the run."""
        return self.silver.watermark


def window_problem(
    plan_spec: PipelineSpec, window: ReplayWindow, start: int
) -> CdfPlatformError | None:
    found = window.break_for_consumer(start - 1)
    if found is None:
        return None
    what = f"bronze versions {start}..{window.latest_version} cannot be replayed: {found.detail}"
    kind: type[CdfPlatformError] = ReplayWindowLost
    if found.kind is WindowBreakKind.SCHEMA_CHANGE:
        kind = IncompatibleSchemaChange
    elif found.kind is WindowBreakKind.CDF_DISABLED:
        kind = CdfNotEnabled
    else:
        what += f" (earliest replayable version is {window.earliest_replayable_version})"
    return kind(what, pipeline_id=plan_spec.id, table=plan_spec.source, version=found.version)


def check_source_columns(spec: PipelineSpec, window: ReplayWindow) -> None:
    """Refuse a bronze schema with a column named like one the change feed or silver adds.

    Delta's change feed adds `_change_type`, `_commit_version` and `_commit_timestamp` to every
    row, and silver adds `_source_commit_version`, `_is_deleted` and `_deleted_at`: a bronze
    column of the same name would be shadowed or collide, so it is refused before any read.

    Raises:
        InvalidPipelineSpec: naming the colliding columns.
    """
    schema = window.log.schema_at(window.latest_version) or {}
    fields = schema.get("fields", [])
    columns = (
        [str(f["name"]) for f in fields if isinstance(f, dict)] if isinstance(fields, list) else []
    )
    copied = set(spec.include_columns) if spec.include_columns is not None else set(columns)
    colliding = [c for c in columns if c in CDF_COLUMNS or (c in RESERVED_COLUMNS and c in copied)]
    if colliding:
        raise InvalidPipelineSpec(
            f"bronze columns {colliding} are named like columns the change feed or silver adds "
            f"({sorted(CDF_COLUMNS | RESERVED_COLUMNS)})",
            pipeline_id=spec.id,
            table=spec.source,
            action="rename the bronze column (a silver column name can also be left out with "
            "`include_columns`)",
        )


def reset_problem(
    spec: PipelineSpec, silver: SilverState, window: ReplayWindow, known_source_id: str | None
) -> SourceReset | None:
    watermark = silver.watermark
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


def plan_run(
    spec: PipelineSpec,
    *,
    now: datetime | None = None,
    known_source_id: str | None = None,
) -> RunPlan:
    """Decide what a run of `spec` must do, from the bronze and silver logs alone.

    Args:
        spec: the pipeline (locations resolved).
        now: the clock for lag and headroom (default: current UTC time).
        known_source_id: the bronze table id recorded in the control table, used when silver's
            recent log no longer holds it.

    Raises:
        SourceNotFound: bronze is missing or not a Delta table.
        TargetOwnershipConflict: silver belongs to another pipeline, or its location holds
            files that are not a Delta table.
    """
    now = now or datetime.now(UTC)
    if not is_delta_table(spec.source):
        raise SourceNotFound(
            f"no Delta table at {spec.source}", pipeline_id=spec.id, table=spec.source
        )
    silver = read_silver_state(spec.target, spec.id)
    if silver.exists and silver.owner != spec.id:
        raise TargetOwnershipConflict(
            f"silver table is owned by {silver.owner!r}"
            if silver.owner
            else "silver table exists but was not created by cdf_platform",
            pipeline_id=spec.id,
            table=spec.target,
        )
    if not silver.exists and holds_foreign_files(spec.target):
        raise foreign_files_at_target(spec.id, spec.target)
    window = compute_replay_window(spec.source, now=now)
    check_source_columns(spec, window)
    assessment = assess_consumer(window, silver.watermark, now=now)
    latest = window.latest_version

    def make(mode: RunMode, start: int | None, problem: CdfPlatformError | None = None) -> RunPlan:
        return RunPlan(spec, mode, silver, window, assessment, start, latest, problem)

    reset = reset_problem(spec, silver, window, known_source_id)
    if reset is not None:
        return make(RunMode.REBUILD, None, reset)
    if silver.watermark is None:
        if not window.cdf_enabled_at_latest:
            raise CdfNotEnabled(
                "the change feed is off on the source, so silver could not follow it",
                pipeline_id=spec.id,
                table=spec.source,
            )
        return make(RunMode.INITIAL_LOAD, None)
    if silver.watermark >= latest:
        return make(RunMode.NOOP, None)
    start = silver.watermark + 1
    problem = window_problem(spec, window, start)
    if problem is not None:
        return make(RunMode.REBUILD, start, problem)
    return make(RunMode.INCREMENTAL, start)
