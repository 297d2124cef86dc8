"""The `replay_window` check: can silver still catch up from bronze's change feed, and for how
long.

Passes while the first unapplied bronze commit is inside the exact replay window (DESIGN.md
section 4) with at least `min_headroom_hours` to spare; WARN below that headroom, ERROR once the
window is lost. It is blocking: a run that includes it does not materialize silver's downstream
assets (gold) after an ERROR. The rebuild sensor reads its evaluations. Never starts Spark.
"""

import dagster as dg

from cdf_platform.core.spec import PipelineSpec
from cdf_platform.orchestration.figures import count, flag, headroom_hours, hours, text
from cdf_platform.orchestration.lake_resource import ControlTableResource
from cdf_platform.orchestration.silver import silver_key
from cdf_platform.planning.status import PipelineStatus, WindowState, pipeline_status

REPLAY_WINDOW = "replay_window"


def replay_window_result(
    spec: PipelineSpec, status: PipelineStatus, headroom: float | None
) -> dg.AssetCheckResult:
    """The check result for `status`; `headroom` as from `checks.figures.headroom_hours`."""
    metadata: dict[str, dg.MetadataValue] = {
        "earliest_replayable_version": count(status.earliest_replayable_version),
        "watermark": count(status.watermark),
        "latest_version": count(status.latest_version),
        "headroom_hours": hours(headroom),
        "min_headroom_hours": hours(spec.min_headroom_hours),
        "replayable": flag(status.replayable),
        "state": text(status.state.value),
        "problem_code": text(status.problem_code),
    }
    if status.state is WindowState.LOST:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"replay window lost: {status.problem}",
            metadata=metadata,
        )
    if status.state is WindowState.SOURCE_MISSING:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"bronze is missing: {status.problem}",
            metadata=metadata,
        )
    if status.state is WindowState.LOW_HEADROOM:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=(
                f"{headroom or 0:.1f} h until bronze version {(status.watermark or 0) + 1} leaves "
                f"the replay window (minimum {spec.min_headroom_hours:g} h): run silver, or "
                "raise delta.deletedFileRetentionDuration on bronze"
            ),
            metadata=metadata,
        )
    return dg.AssetCheckResult(
        passed=True,
        description=f"replayable from version {status.earliest_replayable_version}",
        metadata=metadata,
    )


def replay_window_check(spec: PipelineSpec) -> dg.AssetChecksDefinition:
    """The blocking `replay_window` check of `spec`'s silver asset."""

    @dg.asset_check(
        asset=silver_key(spec.id),
        name=REPLAY_WINDOW,
        blocking=True,
        description=(
            "Whether the bronze versions silver has not applied can still be read from the "
            f"change feed: warns below {spec.min_headroom_hours:g} hours of headroom, errors "
            "(and blocks downstream assets) once the window is lost."
        ),
    )
    def _replay_window(control_table: ControlTableResource) -> dg.AssetCheckResult:
        resolved = control_table.spec(spec.id)
        status = pipeline_status(resolved)
        return replay_window_result(resolved, status, headroom_hours(resolved, status))

    return _replay_window
