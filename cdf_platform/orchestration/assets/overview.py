"""`platform/pipelines`: every pipeline's position on one page, problems first.

An asset the checks job materializes with the checks (every 15 minutes on the checks schedule,
no Spark). Its metadata is Markdown made for a fleet of hundreds of pipelines:

- one summary line: the pipelines per state, e.g. "500 pipelines: 3 LOST, 1 BLOCKED, 496 OK",
  and how many of them are over their lag limit;
- a table of at most `TABLE_ROWS` pipelines (state, lag in hours against
  `max_allowed_lag_hours`, headroom in hours against `min_headroom_hours`) in the order below,
  then a line saying how many were left out: every pipeline is in `cdf-platform status --json`
  and on its silver asset's checks;
- the problems of the rows shown, in the same order: the incident code, "headroom under
  min", "lag over max", or the spec edits taken forward only ("Problems (the first 50 of 62):"
  when some were left out).

The order puts what needs a person first (`attention_rank`), most urgent first:

1. `LOST`: bronze no longer holds the changes silver needs; a rebuild repairs it
   (`SNAPSHOT_REBUILD`) or waits for a person (`FAIL_FAST`).
2. `BLOCKED`: every run fails until a person fixes the input or the spec.
3. `SOURCE_MISSING`: nothing to read; bronze was dropped, moved or never written.
4. `SPEC_CHANGED`: silver no longer is its spec applied to bronze; the next run reconciles it
   (a `FAIL_FAST` one refuses, and its headroom runs down). The state takes precedence over
   `LOW_HEADROOM`, so a low headroom may hide behind it.
5. `LOW_HEADROOM`: the window is lost unless a run catches up in time; that is still a
   deadline, where the states above are already broken.
6. `OK` or `NOT_STARTED` with lag over `max_allowed_lag_hours`: silver is older than its limit.
7. `NOT_STARTED` with a problem (e.g. a catalog name no run has located yet).
8. Spec edits taken forward only: older rows keep the previous spec's values until a rebuild.
9. Healthy (`OK`, `NOT_STARTED`).

Within each group a pipeline nearer its limits comes first (`nearness`: the larger of lag over
`max_allowed_lag_hours` and `min_headroom_hours` over headroom), then by id, then in the order
the pipelines are declared in. So every problem is shown (up to `TABLE_ROWS`) before any healthy
pipeline, and the healthy ones shown are those nearest their limits.

It reads at 1,000 px: Dagster shows it in the Value column of the asset's metadata, a few
hundred pixels wide, so the table keeps to four columns with short headers and figures without
spaces (a figure never breaks over two lines), and bounding it keeps the page short at any fleet
size. Versions, per-pipeline plots and the problem's full text stay on each silver asset's
checks. Totals are numbers the UI plots over time: `unhealthy_pipelines`, a count per problem
state (`lost_pipelines`, `blocked_pipelines`, `source_missing_pipelines`,
`spec_changed_pipelines`, `low_headroom_pipelines`), `lag_exceeded_pipelines`, `max_lag_hours`
and `least_headroom_hours` (measured figures, named apart from the limits `max_allowed_lag_hours`
and `min_headroom_hours`), each on every materialization so a plot has no holes:
`least_headroom_hours` is the least headroom, as every view gives it (a caught-up pipeline's
is its retention horizon, a lost window's 0), left out only while no pipeline has one (no bronze
table yet); `pipeline_count` is text (it moves only when pipelines are added). While a
pipeline has a `quarantine` expectation, a last line gives each such pipeline's quarantined
rows and `quarantined_rows` plots their sum.

The work is linear in the pipelines: the control tables are read once for all of them
(`pipeline_statuses`), and only the rows shown are ordered (a heap of `TABLE_ROWS`).

In the asset graph it hangs off the bronze tables, whose logs it reads. It deliberately does
not depend on the silver assets, although it reads their watermarks too: `replay_window` is a
blocking check, and an asset downstream of a silver asset whose window is lost is not
materialized in a run with that check (checks_job), which is exactly when the overview matters
most.
"""

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence

import dagster as dg

from cdf_platform.core.spec.expectations import ExpectationAction
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.shared.figures import hours, text
from cdf_platform.orchestration.shared.keys import bronze_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.planning.status import (
    PipelineStatus,
    SpecState,
    WindowState,
    pipeline_statuses,
)
from cdf_platform.state.control import ControlTable
from cdf_platform.state.quarantine import quarantined_rows

OVERVIEW_KEY = dg.AssetKey(["platform", "pipelines"])
_HEALTHY = (WindowState.OK, WindowState.NOT_STARTED)

TABLE_ROWS = 50
"""Rows the table shows at most: every problem first, then the healthy pipelines nearest their
limits."""

PROBLEM_STATES = (
    WindowState.LOST,
    WindowState.BLOCKED,
    WindowState.SOURCE_MISSING,
    WindowState.SPEC_CHANGED,
    WindowState.LOW_HEADROOM,
)
"""The states that need a person, most urgent first (the module docstring says why)."""

_LAG_EXCEEDED, _NOT_STARTED_PROBLEM, _FORWARD_ONLY, _HEALTHY_RANK = range(
    len(PROBLEM_STATES), len(PROBLEM_STATES) + 4
)
_EVERY_PIPELINE = "all are in `cdf-platform status --json` and on each silver asset's checks"


def attention_rank(status: PipelineStatus) -> int:
    """The status's group in the overview's order: 0 (`LOST`) is the most urgent, the last
    (`OK` and `NOT_STARTED` without a problem) the healthy ones."""
    if status.state in PROBLEM_STATES:
        return PROBLEM_STATES.index(status.state)
    if status.lag_exceeded:
        return _LAG_EXCEEDED
    if status.problem_code:
        return _NOT_STARTED_PROBLEM
    if status.spec_state is SpecState.FORWARD_ONLY:
        return _FORWARD_ONLY
    return _HEALTHY_RANK


def nearness(spec: PipelineSpec, status: PipelineStatus) -> float:
    """How near `status` is to its nearer limit: the larger of lag over `max_allowed_lag_hours`
    and `min_headroom_hours` over headroom (1.0 at a limit, above it past it; infinite with no
    headroom left); 0.0 without figures."""
    ratios = [0.0]
    if status.lag_hours is not None:
        ratios.append(status.lag_hours / spec.max_allowed_lag_hours)
    headroom = status.headroom_hours
    if headroom is not None and spec.min_headroom_hours > 0:
        ratios.append(spec.min_headroom_hours / headroom if headroom > 0 else math.inf)
    return max(ratios)


def problems_of(status: PipelineStatus) -> list[str]:
    """What needs a person in `status` (empty exactly when it is healthy), most urgent first."""
    found = []
    if status.problem_code:
        found.append(status.problem_code)
    elif status.state is WindowState.LOW_HEADROOM:
        found.append("headroom under min")
    elif status.state in PROBLEM_STATES:
        found.append(status.state.value)
    if status.lag_exceeded:
        found.append("lag over max")
    if status.spec_state is SpecState.FORWARD_ONLY:
        found.append(f"spec edits of {', '.join(status.spec_changed_fields)} forward only")
    return found


def _against(value: float | None, limit: float) -> str:
    """`value/limit` in hours, e.g. "5.25/24"; "-" when the figure does not exist (as `status`
    prints it)."""
    return "-" if value is None else f"{value:.2f}/{limit:g}"


def _cell(value: str) -> str:
    return value.replace("|", "\\|").replace("\n", " ")


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def summary_line(statuses: Sequence[PipelineStatus]) -> str:
    """The pipelines per state, problems first, and how many are over their lag limit, e.g.
    `500 pipelines: 3 LOST, 1 BLOCKED, 496 OK (2 with lag over max).`"""
    states = Counter(status.state for status in statuses)
    counts = [f"{states[s]} {s.value}" for s in (*PROBLEM_STATES, *_HEALTHY) if states[s]]
    line = _plural(len(statuses), "pipeline") + (": " + ", ".join(counts) if counts else "")
    lagging = sum(status.lag_exceeded for status in statuses)
    return line + (f" ({lagging} with lag over max)." if lagging else ".")


def overview_table(
    specs: Sequence[PipelineSpec], statuses: Sequence[PipelineStatus], *, rows: int = TABLE_ROWS
) -> str:
    """The Markdown of `statuses` (`specs[i]`'s is `statuses[i]`): the summary line, the first
    `rows` pipelines in the overview's order (the module docstring), how many were left out,
    and the problems of the rows shown."""
    if len(specs) != len(statuses) or rows < 1:
        raise ValueError(f"{len(specs)} specs for {len(statuses)} statuses in {rows} rows")
    ranks = [attention_rank(status) for status in statuses]
    shown = heapq.nsmallest(
        rows,
        range(len(statuses)),
        key=lambda i: (ranks[i], -nearness(specs[i], statuses[i]), specs[i].id),
    )
    lines = [
        summary_line(statuses),
        "",
        "| pipeline | state | lag h/max | headroom h/min |",
        "|---|---|---:|---:|",
    ]
    problems = []
    for i in shown:
        spec, status = specs[i], statuses[i]
        cells = [
            spec.id,
            status.state.value,
            _against(status.lag_hours, spec.max_allowed_lag_hours),
            _against(status.headroom_hours, spec.min_headroom_hours),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        if found := problems_of(status):
            problems.append(f"- {_cell(spec.id)}: {_cell('; '.join(found))}")
    all_problems = sum(rank < _HEALTHY_RANK for rank in ranks)
    left_out, problems_left_out = len(statuses) - len(shown), all_problems - len(problems)
    if left_out:
        which = (
            f"{problems_left_out} with problems, after those above"
            if problems_left_out
            else "healthy and further from their limits"
        )
        more = _plural(left_out, "more pipeline")
        lines.extend(["", f"{more} not shown ({which}): {_EVERY_PIPELINE}."])
    lines.append("")
    if not problems:
        lines.append("Problems: none.")
    elif problems_left_out:
        lines.extend([f"Problems (the first {len(problems)} of {all_problems}):", "", *problems])
    else:
        lines.extend(["Problems:", "", *problems])
    return "\n".join(lines)


def _bronze_keys(specs: Sequence[PipelineSpec]) -> list[dg.AssetKey]:
    """The bronze asset of every spec, each once (pipelines may share a bronze table)."""
    return list(dict.fromkeys(bronze_key(spec) for spec in specs))


def quarantine_sizes(specs: Sequence[PipelineSpec], control: ControlTable) -> dict[str, int]:
    """Pipeline id -> the rows its quarantine holds, for every pipeline with a `quarantine`
    expectation (0 before its quarantine exists), JVM-free."""
    return {
        spec.id: quarantined_rows(control, spec.id) or 0
        for spec in specs
        if any(e.action is ExpectationAction.QUARANTINE for e in spec.expectations)
    }


def _quarantine_line(quarantined: Mapping[str, int]) -> list[str]:
    if not quarantined:
        return []
    held = ", ".join(f"{_cell(pid)} {n}" for pid, n in sorted(quarantined.items()))
    return ["", f"Quarantined rows: {held}."]


def overview_metadata(
    specs: Sequence[PipelineSpec],
    statuses: Sequence[PipelineStatus],
    quarantined: Mapping[str, int] | None = None,
) -> dict[str, dg.MetadataValue]:
    """The overview's metadata: the Markdown, the count (text), and the figures it plots, each
    numeric on every materialization (a state without pipelines counts 0; the least headroom
    left out while no pipeline has one; the quarantined rows while a pipeline quarantines)."""
    lags = [s.lag_hours for s in statuses if s.lag_hours is not None]
    headrooms = [h for s in statuses if (h := s.headroom_hours) is not None]
    states = Counter(status.state for status in statuses)
    quarantined = quarantined or {}
    table = "\n".join([overview_table(specs, statuses), *_quarantine_line(quarantined)])
    return {
        "pipelines": dg.MetadataValue.md(table),
        "pipeline_count": text(len(statuses)),
        "unhealthy_pipelines": dg.MetadataValue.int(sum(s.state not in _HEALTHY for s in statuses)),
        **{
            f"{state.value.lower()}_pipelines": dg.MetadataValue.int(states[state])
            for state in PROBLEM_STATES
        },
        "lag_exceeded_pipelines": dg.MetadataValue.int(sum(s.lag_exceeded for s in statuses)),
        "max_lag_hours": hours(max(lags, default=0.0)),
        **({"least_headroom_hours": hours(min(headrooms))} if headrooms else {}),
        **(
            {"quarantined_rows": dg.MetadataValue.int(sum(quarantined.values()))}
            if quarantined
            else {}
        ),
    }


def overview_asset(specs: list[PipelineSpec]) -> dg.AssetsDefinition:
    """The `platform/pipelines` asset over `specs`."""

    @dg.asset(
        key=OVERVIEW_KEY,
        deps=_bronze_keys(specs),
        group_name="platform",
        kinds={"delta"},
        description="Every pipeline's state, lag and replay-window headroom on one page, "
        "problems first: a count per state, then a Markdown table of the pipelines that need a "
        f"person and of the healthy ones nearest their limits (at most {TABLE_ROWS} rows), "
        "refreshed with the checks; reads the bronze and silver logs only, never starts Spark. "
        "Not downstream of silver on purpose: a lost replay window (a blocking check) must not "
        "stop it.",
    )
    def _overview(lake: LakeLayout) -> dg.MaterializeResult:
        control = lake.control()
        statuses = pipeline_statuses(specs, control)
        held = quarantine_sizes(specs, control)
        return dg.MaterializeResult(metadata=overview_metadata(specs, statuses, held))

    return _overview
