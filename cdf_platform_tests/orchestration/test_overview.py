"""The all-pipelines overview reads at 1,000 px: four columns, each figure without a space to
break it, the problems below the table, and "none" said plainly."""

from __future__ import annotations

from dataclasses import replace

from cdf_platform.orchestration.overview import overview_table
from cdf_platform_tests.orchestration.test_check_results import (
    CAUGHT_UP,
    HEALTHY,
    LOST,
    MISSING,
    SPEC,
)

PAYMENTS = SPEC.model_copy(update={"id": "payments", "max_allowed_lag_hours": 0.5})


def test_one_row_per_pipeline_with_hours_against_their_limits() -> None:
    table = overview_table(
        [SPEC, PAYMENTS, SPEC], [replace(HEALTHY, lag_hours=0.000135900), CAUGHT_UP, MISSING]
    )
    assert table.splitlines() == [
        "| pipeline | state | lag h/max | headroom h/min |",
        "|---|---|---:|---:|",
        "| orders | OK | 0.00/24 | 120.50/48 |",
        "| payments | OK | 0.00/0.5 | 168.00/48 |",
        "| orders | SOURCE_MISSING | n/a | n/a |",
        "",
        "Problems:",
        "",
        "- orders: SOURCE_NOT_FOUND",
    ]


def test_a_fleet_without_problems_says_none() -> None:
    table = overview_table([SPEC], [HEALTHY])
    assert table.endswith("\n\nProblems: none.")
    assert "null" not in table


def test_a_lost_window_is_named_below_the_table() -> None:
    table = overview_table([SPEC], [LOST])
    assert "| orders | LOST | 5.25/24 | 0.00/48 |" in table
    assert table.endswith("- orders: WATERMARK_OUTSIDE_RETENTION")
