"""`platform/pipelines`: every pipeline's position on one page.

An asset the checks job materializes with the checks (every 15 minutes on the checks schedule,
no Spark). Its metadata is a narrow Markdown table, one row per pipeline (state, lag in hours
against `max_allowed_lag_hours`, headroom in hours against `min_headroom_hours`), the problems
below it, and totals that the UI plots over time. It reads at 1,000 px: Dagster shows it in
the Value column of the asset's metadata, a few hundred pixels wide, so the table keeps to four
columns with short headers and figures without spaces (a figure never breaks over two lines).
Versions, per-pipeline plots and the problem's full text stay on each silver asset's checks.

In the asset graph it hangs off the bronze tables, whose logs it reads. It deliberately does
not depend on the silver assets, although it reads their watermarks too: `replay_window` is a
blocking check, and an asset downstream of a silver asset whose window is lost is not
materialized in a run with that check (checks_job), which is exactly when the overview matters
most.
"""

from collections.abc import Sequence

import dagster as dg

from cdf_platform.core.spec import PipelineSpec
from cdf_platform.orchestration.figures import headroom_hours, hours, text
from cdf_platform.orchestration.keys import bronze_key
from cdf_platform.orchestration.resources import LakeLayout
from cdf_platform.planning.status import PipelineStatus, SpecState, WindowState, pipeline_status

OVERVIEW_KEY = dg.AssetKey(["platform", "pipelines"])
_HEALTHY = (WindowState.OK, WindowState.NOT_STARTED)


def _against(value: float | None, limit: float) -> str:
    """`value/limit` in hours, e.g. "5.25/24"; "n/a" when the figure does not exist."""
    return "n/a" if value is None else f"{value:.2f}/{limit:g}"


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def overview_table(specs: Sequence[PipelineSpec], statuses: Sequence[PipelineStatus]) -> str:
    """The Markdown of `statuses` (in the order of `specs`): the table, then the problems."""
    lines = [
        "| pipeline | state | lag h/max | headroom h/min |",
        "|---|---|---:|---:|",
    ]
    problems = []
    for spec, status in zip(specs, statuses, strict=True):
        cells = [
            spec.id,
            status.state.value,
            _against(status.lag_hours, spec.max_allowed_lag_hours),
            _against(headroom_hours(status), spec.min_headroom_hours),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        if status.problem_code:
            problems.append(f"- {_cell(spec.id)}: {_cell(status.problem_code)}")
        elif status.spec_state is SpecState.FORWARD_ONLY:
            fields = ", ".join(status.spec_changed_fields)
            problems.append(f"- {_cell(spec.id)}: spec edits of {_cell(fields)} forward only")
    lines.append("")
    lines.extend(["Problems:", "", *problems] if problems else ["Problems: none."])
    return "\n".join(lines)


def _bronze_keys(specs: Sequence[PipelineSpec]) -> list[dg.AssetKey]:
    """The bronze asset of every spec, each once (pipelines may share a bronze table)."""
    return list(dict.fromkeys(bronze_key(spec) for spec in specs))


def overview_asset(specs: list[PipelineSpec]) -> dg.AssetsDefinition:
    """The `platform/pipelines` asset over `specs`."""

    @dg.asset(
        key=OVERVIEW_KEY,
        deps=_bronze_keys(specs),
        group_name="platform",
        kinds={"delta"},
        description="Every pipeline's state, lag and replay-window headroom on one page (a "
        "Markdown table), refreshed with the checks; reads the bronze and silver logs only, "
        "never starts Spark. Not downstream of silver on purpose: a lost replay window "
        "(a blocking check) must not stop it.",
    )
    def _overview(lake: LakeLayout) -> dg.MaterializeResult:
        control = lake.control()
        statuses = [pipeline_status(spec, control) for spec in specs]
        lags = [s.lag_hours for s in statuses if s.lag_hours is not None]
        headrooms = [h for s in statuses if (h := headroom_hours(s)) is not None]
        return dg.MaterializeResult(
            metadata={
                "pipelines": dg.MetadataValue.md(overview_table(specs, statuses)),
                "pipeline_count": text(len(statuses)),
                "unhealthy_pipelines": dg.MetadataValue.int(
                    sum(s.state not in _HEALTHY for s in statuses)
                ),
                "max_lag_hours": hours(max(lags, default=0.0)),
                "min_headroom_hours": hours(min(headrooms, default=0.0)),
            }
        )

    return _overview
