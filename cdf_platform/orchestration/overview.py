"""`platform/pipelines`: every pipeline's position on one page.

An asset the checks job materializes with the checks (every 15 minutes on the checks schedule,
no Spark): its metadata is a Markdown table, one row per pipeline (state, watermark, latest
bronze version, lag in versions and hours against the limit, headroom against the minimum,
earliest replayable version, problem), plus totals that the UI plots over time. The per-pipeline
plots stay on each silver asset's checks.

It deliberately has no dependency on the silver assets: `replay_window` is a blocking check, and
an asset downstream of a silver asset whose window is lost would not materialize, which is
exactly when the overview matters most.
"""

from collections.abc import Sequence

import dagster as dg

from cdf_platform.core.spec import PipelineSpec
from cdf_platform.orchestration.figures import headroom_hours
from cdf_platform.orchestration.resources import LakeLayout
from cdf_platform.planning.status import PipelineStatus, WindowState, pipeline_status

OVERVIEW_KEY = dg.AssetKey(["platform", "pipelines"])
_HEALTHY = (WindowState.OK, WindowState.NOT_STARTED)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def overview_table(specs: Sequence[PipelineSpec], statuses: Sequence[PipelineStatus]) -> str:
    """The Markdown table of `statuses` (in the order of `specs`)."""
    lines = [
        "| pipeline | state | watermark | latest | lag (versions) | lag h / max | "
        "headroom h / min | earliest replayable | problem |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for spec, status in zip(specs, statuses, strict=True):
        lag = f"{_cell(status.lag_hours)} / {spec.max_allowed_lag_hours:g}"
        headroom = f"{_cell(headroom_hours(status))} / {spec.min_headroom_hours:g}"
        cells = [
            spec.id,
            status.state.value,
            status.watermark,
            status.latest_version,
            status.version_lag,
            lag,
            headroom,
            status.earliest_replayable_version,
            status.problem_code,
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def overview_asset(specs: list[PipelineSpec]) -> dg.AssetsDefinition:
    """The `platform/pipelines` asset over `specs`."""

    @dg.asset(
        key=OVERVIEW_KEY,
        group_name="platform",
        kinds={"delta"},
        description="Every pipeline's lag and replay-window headroom on one page (a Markdown "
        "table), refreshed with the checks; reads logs only, never starts Spark.",
    )
    def _overview(lake: LakeLayout) -> dg.MaterializeResult:
        control = lake.control()
        statuses = [pipeline_status(spec, control) for spec in specs]
        lags = [s.lag_hours for s in statuses if s.lag_hours is not None]
        headrooms = [h for s in statuses if (h := headroom_hours(s)) is not None]
        return dg.MaterializeResult(
            metadata={
                "pipelines": dg.MetadataValue.md(overview_table(specs, statuses)),
                "pipeline_count": len(statuses),
                "unhealthy_pipelines": sum(s.state not in _HEALTHY for s in statuses),
                "max_lag_hours": round(max(lags, default=0.0), 3),
                "min_headroom_hours": round(min(headrooms, default=0.0), 3),
            }
        )

    return _overview
