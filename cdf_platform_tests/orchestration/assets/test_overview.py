"""The all-pipelines overview reads at 1,000 px with hundreds of pipelines: a count per state,
then at most 50 rows with what needs a person first and the healthy pipelines nearest their
limits next, a line saying what was left out, and the problems in the same order; four narrow
columns, each figure without a space to break it, and "none" said plainly."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.assets.overview import TABLE_ROWS, overview_metadata, overview_table
from cdf_platform.planning.status import (
    PipelineStatus,
    SpecState,
    WindowState,
    pipeline_status,
    pipeline_statuses,
)
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_tests.orchestration.test_check_results import (
    BLOCKED,
    CAUGHT_UP,
    HEALTHY,
    LAGGING,
    LOST,
    LOW,
    MISSING,
    SPEC,
)

PAYMENTS = SPEC.model_copy(update={"id": "payments", "max_allowed_lag_hours": 0.5})
SPEC_CHANGED = replace(
    HEALTHY, state=WindowState.SPEC_CHANGED, problem_code="SPEC_CHANGED", problem="SpecChanged"
)
FORWARD_ONLY = replace(HEALTHY, spec_state=SpecState.FORWARD_ONLY, spec_changed_fields=("where",))
UNLOCATED = PipelineStatus.without_figures(
    "orders", WindowState.NOT_STARTED, "TABLE_NAME_NOT_LOCATED", "not located"
)
NEVER_RAN = PipelineStatus.without_figures("orders", WindowState.NOT_STARTED, None, None)


def fleet(*statuses: PipelineStatus) -> tuple[list[PipelineSpec], list[PipelineStatus]]:
    """`statuses` as pipelines p000, p001, ... of SPEC's limits, in that order."""
    ids = [f"p{index:03d}" for index in range(len(statuses))]
    specs = [SPEC.model_copy(update={"id": pipeline_id}) for pipeline_id in ids]
    return specs, [replace(s, pipeline_id=i) for i, s in zip(ids, statuses, strict=True)]


def row_ids(table: str) -> list[str]:
    """The pipeline of each table row, top to bottom."""
    rows = [line for line in table.splitlines() if line.startswith("| ")][1:]
    return [row.split(" | ")[0].removeprefix("| ") for row in rows]


def test_one_row_per_pipeline_with_hours_against_their_limits() -> None:
    table = overview_table(
        [SPEC, PAYMENTS, SPEC], [replace(HEALTHY, lag_hours=0.000135900), CAUGHT_UP, MISSING]
    )
    assert table.splitlines() == [
        "3 pipelines: 1 SOURCE_MISSING, 2 OK.",
        "",
        "| pipeline | state | lag h/max | headroom h/min |",
        "|---|---|---:|---:|",
        "| orders | SOURCE_MISSING | - | - |",
        "| orders | OK | 0.00/24 | 120.50/48 |",
        "| payments | OK | 0.00/0.5 | 168.00/48 |",  # caught up: the retention horizon
        "",
        "Problems:",
        "",
        "- orders: SOURCE_NOT_FOUND",
    ]


def test_a_fleet_without_problems_says_none() -> None:
    table = overview_table([SPEC], [HEALTHY])
    assert table.startswith("1 pipeline: 1 OK.\n")
    assert table.endswith("\n\nProblems: none.")
    assert "null" not in table


def test_a_lost_window_is_named_below_the_table() -> None:
    table = overview_table([SPEC], [LOST])
    assert "| orders | LOST | 5.25/24 | 0.00/48 |" in table
    assert table.endswith("- orders: WATERMARK_OUTSIDE_RETENTION")


def test_a_problem_after_healthy_pipelines_in_the_pipelines_file_comes_first() -> None:
    specs, statuses = fleet(HEALTHY, HEALTHY, HEALTHY, LOST)
    assert row_ids(overview_table(specs, statuses)) == ["p003", "p000", "p001", "p002"]


def test_problems_in_order_of_urgency_each_named_in_the_same_order() -> None:
    # The pipelines file lists them least urgent first.
    order = [FORWARD_ONLY, UNLOCATED, LAGGING, LOW, SPEC_CHANGED, MISSING, BLOCKED, LOST]
    specs, statuses = fleet(HEALTHY, *order)
    table = overview_table(specs, statuses)
    assert row_ids(table) == [f"p{index:03d}" for index in range(8, -1, -1)]
    assert table.split("Problems:\n\n")[1].splitlines() == [
        "- p008: WATERMARK_OUTSIDE_RETENTION",
        "- p007: TARGET_OWNED_BY_OTHER_PIPELINE",
        "- p006: SOURCE_NOT_FOUND",
        "- p005: SPEC_CHANGED",
        "- p004: headroom under min",
        "- p003: lag over max",
        "- p002: TABLE_NAME_NOT_LOCATED",
        "- p001: spec edits of where forward only",
    ]


def test_healthy_pipelines_nearest_a_limit_come_first_then_by_id() -> None:
    specs, statuses = fleet(
        NEVER_RAN,  # no figures: last
        replace(HEALTHY, lag_hours=1.0, headroom_hours=150.0),  # 150/48 h: furthest
        replace(HEALTHY, lag_hours=20.0),  # 20 of 24 h of lag
        replace(HEALTHY, lag_hours=1.0, headroom_hours=50.0),  # 48 of 50 h: nearest
        replace(HEALTHY, lag_hours=1.0, headroom_hours=150.0),  # a tie with p001: by id
    )
    assert row_ids(overview_table(specs, statuses)) == ["p003", "p002", "p001", "p004", "p000"]


def test_pipelines_of_one_id_keep_the_order_of_the_pipelines_file() -> None:
    table = overview_table([SPEC, SPEC], [replace(HEALTHY, lag_hours=1.0), HEALTHY])
    assert "| orders | OK | 1.00/24 | 120.50/48 |\n| orders | OK | 5.25/24 |" in table


def test_the_summary_counts_every_state_problems_first() -> None:
    specs, statuses = fleet(HEALTHY, LOST, NEVER_RAN, BLOCKED, LOST, LAGGING, LOW)
    assert overview_table(specs, statuses).splitlines()[0] == (
        "7 pipelines: 2 LOST, 1 BLOCKED, 1 LOW_HEADROOM, 2 OK, 1 NOT_STARTED (1 with lag over max)."
    )


def test_300_pipelines_show_every_problem_then_the_healthy_nearest_their_limits() -> None:
    statuses = [replace(HEALTHY, lag_hours=0.0, headroom_hours=500.0 - i) for i in range(300)]
    statuses[10], statuses[250] = MISSING, LOST
    specs, statuses = fleet(*statuses)
    table = overview_table(specs, statuses)
    ids = row_ids(table)
    assert len(ids) == TABLE_ROWS == 50
    # The two problems, then the 48 healthy pipelines of least headroom (p299 has 201 h).
    assert ids[:4] == ["p250", "p010", "p299", "p298"]
    assert ids[-1] == "p252"
    assert table.splitlines()[0] == "300 pipelines: 1 LOST, 1 SOURCE_MISSING, 298 OK."
    assert (
        "| p252 | OK | 0.00/24 | 248.00/48 |\n"
        "\n"
        "250 more pipelines not shown (healthy and further from their limits): all are in "
        "`cdf-platform status --json` and on each silver asset's checks.\n"
        "\n"
        "Problems:\n"
        "\n"
        "- p250: WATERMARK_OUTSIDE_RETENTION\n"
        "- p010: SOURCE_NOT_FOUND"
    ) in table
    assert table.endswith("- p010: SOURCE_NOT_FOUND")


def test_problems_beyond_the_table_are_counted_not_listed() -> None:
    specs, statuses = fleet(*[HEALTHY] * 240, *[LOST] * 60)
    table = overview_table(specs, statuses)
    assert row_ids(table) == [f"p{index:03d}" for index in range(240, 290)]
    assert "\n250 more pipelines not shown (10 with problems, after those above): " in table
    problems = table.split("Problems (the first 50 of 60):\n\n")[1].splitlines()
    assert problems == [f"- p{index:03d}: WATERMARK_OUTSIDE_RETENTION" for index in range(240, 290)]


def test_the_fleet_is_plotted_by_state_on_every_materialization() -> None:
    specs, statuses = fleet(HEALTHY, LOST, LOST, LAGGING, MISSING)
    metadata = overview_metadata(specs, statuses)
    plotted = {
        name: value.value
        for name, value in metadata.items()
        if isinstance(value, dg.IntMetadataValue | dg.FloatMetadataValue)
    }
    assert plotted == {
        "unhealthy_pipelines": 3,
        "lost_pipelines": 2,
        "blocked_pipelines": 0,
        "source_missing_pipelines": 1,
        "spec_changed_pipelines": 0,
        "low_headroom_pipelines": 0,
        "lag_exceeded_pipelines": 1,
        "max_lag_hours": 30.0,
        "least_headroom_hours": 0.0,
    }
    assert metadata["pipeline_count"].value == "5"


def test_statuses_read_for_the_whole_fleet_are_each_pipelines_own(
    lake: Path,
) -> None:
    """Pipelines by path (one with a state row), a catalog name located and one not yet: the
    statuses from one read of the control tables are each pipeline's own."""
    control = ControlTable(str(lake / "_control"))
    for name in ("orders", "payments", "refunds"):
        write_orders_batch(str(lake / "bronze" / name), batch_size=5)
    control.upsert_state({"pipeline_id": "orders", "last_commit_version": 0})
    control.record_location(
        "bronze.refunds", str(lake / "bronze" / "refunds"), None, located_by="t"
    )
    specs = [
        SPEC.model_copy(update={"source": str(lake / "bronze" / name), "id": name})
        for name in ("orders", "payments")
    ] + [
        SPEC.model_copy(update={"id": name, "source": f"bronze.{name}"})
        for name in ("refunds", "returns")
    ]
    now = datetime.now(UTC)
    statuses = pipeline_statuses(specs, control, now=now)
    assert statuses == [pipeline_status(spec, control, now=now) for spec in specs]
    assert [s.problem_code for s in statuses] == [None, None, None, "TABLE_NAME_NOT_LOCATED"]


@pytest.mark.parametrize("rows", [1, 3])
def test_the_table_holds_the_rows_it_is_given(rows: int) -> None:
    specs, statuses = fleet(HEALTHY, HEALTHY, HEALTHY, LOST)
    assert row_ids(overview_table(specs, statuses, rows=rows)) == ["p003", "p000", "p001"][:rows]
