"""The problems of a pipeline a snapshot rebuild repairs, read from the logs: bronze reset
(recreated, moved, or behind the watermark), else the first break of the replay window after the
watermark; and the action a lost window names, as `cdf_platform.planning.repair` decides it
(the sensors' rebuild, or a person's).

A consumer asset's input is checked by the same `replay_problem`
(`cdf_platform.planning.consumers.input_plan`).

Example:
    >>> problem = lost_window_problem(spec, silver, window, None, None)  # doctest: +SKIP
    >>> type(problem).__name__, problem.version  # doctest: +SKIP
    ('ReplayWindowLost', 58)
"""

from __future__ import annotations

from cdf_platform.core.errors import (
    CdfNotEnabled,
    CdfPlatformError,
    IncompatibleSchemaChange,
    ReplayWindowLost,
    SourceReset,
)
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.repair import repair_decision
from cdf_platform.state.watermark import SilverState
from cdf_platform.window.replay_window import ReplayWindow, WindowBreakKind


def lost_window_problem(
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
        and spec.changes.replays_history
        and silver.watermark is not None
        and silver.watermark < window.latest_version
    ):
        problem = window_problem(spec, window, silver.watermark + 1)
    return problem


def window_problem(spec: PipelineSpec, window: ReplayWindow, start: int) -> CdfPlatformError | None:
    """The classified reason a CDF read of [start, L] cannot give every change, or None; a lost
    window names the repair its `fallback_mode` gives it."""
    problem = replay_problem(spec.id, spec.source, window, start, table_role="bronze")
    if isinstance(problem, ReplayWindowLost):
        problem.resolved_by(lost_window_action(spec))
    return problem


def lost_window_action(spec: PipelineSpec) -> str:
    """What repairs `spec`'s lost window: the sensors' one rebuild (SNAPSHOT_REBUILD), or a
    person's (FAIL_FAST), as `repair_decision` decides; then a retention that covers the
    pause."""
    after = (
        "then raise delta.deletedFileRetentionDuration on the source above the consumer's "
        "longest pause"
    )
    if not repair_decision(spec.fallback_mode).automatic:
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
    what = f"{table_role} {_versions(start, latest)} cannot be read as one change feed: "
    what += found.detail
    kind: type[CdfPlatformError] = ReplayWindowLost
    if found.kind is WindowBreakKind.SCHEMA_CHANGE:
        kind = IncompatibleSchemaChange
    elif found.kind is WindowBreakKind.CDF_DISABLED:
        kind = CdfNotEnabled
    elif (earliest := window.earliest_replayable_version) > start:
        # Which of the versions needed have left the window (E is the first still in it, so
        # start..E-1 have gone and E..L are still readable), and where it starts now.
        what = f"{table_role} {_versions(start, min(earliest - 1, latest))} left the replay window"
        if earliest > latest:
            what += ", which holds no version now"
        else:
            what += f", which now starts at version {earliest} ({table_role} is at {latest})"
        what += f": {found.detail}"
    return kind(what, pipeline_id=consumer, table=table, version=found.version)


def _versions(first: int, last: int) -> str:
    """`version 4`, or `versions 4..5`."""
    return f"version {first}" if last <= first else f"versions {first}..{last}"


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
