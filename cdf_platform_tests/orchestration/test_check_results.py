"""consumer_lag and replay_window results for each pipeline state: pass, WARN or ERROR, with every
plotted figure numeric on every evaluation (-1 for a figure that does not exist) and limits and
counters as text, so the check pages plot only what an operator watches."""

from __future__ import annotations

from dataclasses import replace

import dagster as dg
import pytest

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.checks.silver_checks import (
    consumer_lag_result,
    foreign_writes_result,
    replay_window_result,
)
from cdf_platform.orchestration.shared.figures import UNKNOWN
from cdf_platform.planning.foreign_writes import ForeignWrite
from cdf_platform.planning.status import PipelineStatus, WindowState

SPEC = PipelineSpec(
    id="orders",
    source="/lake/bronze/orders",
    target="/lake/silver/orders",
    keys=["order_id"],
    max_allowed_lag_hours=24,
    min_headroom_hours=48,
)
HEALTHY = PipelineStatus(
    pipeline_id="orders",
    watermark=40,
    latest_version=43,
    version_lag=3,
    data_version_lag=2,
    lag_hours=5.25,
    earliest_replayable_version=12,
    replayable=True,
    headroom_hours=120.5,
    retention_horizon_hours=168.0,
    state=WindowState.OK,
    lag_exceeded=False,
    problem_code=None,
    problem=None,
)
LOW = replace(HEALTHY, headroom_hours=20.0, state=WindowState.LOW_HEADROOM)
LAGGING = replace(HEALTHY, lag_hours=30.0, lag_exceeded=True)
LOST = replace(
    HEALTHY,
    earliest_replayable_version=42,
    replayable=False,
    headroom_hours=0.0,
    state=WindowState.LOST,
    problem_code="WATERMARK_OUTSIDE_RETENTION",
    problem="ReplayWindowLost: bronze versions 41..43 cannot be replayed",
)
MISSING = PipelineStatus.without_figures(
    "orders",
    WindowState.SOURCE_MISSING,
    "SOURCE_NOT_FOUND",
    "no Delta table at /lake/bronze/orders",
)
BLOCKED = replace(
    HEALTHY,
    state=WindowState.BLOCKED,
    replayable=False,
    problem_code="TARGET_OWNED_BY_OTHER_PIPELINE",
    problem="TargetOwnershipConflict: silver table is owned by 'payments'",
)
# Caught up: its headroom is the retention horizon, as every view gives it (`shown_headroom`).
CAUGHT_UP = replace(HEALTHY, watermark=43, version_lag=0, lag_hours=0.0, headroom_hours=168.0)

LAG_FIGURES = ("version_lag", "data_version_lag", "watermark")
WINDOW_FIGURES = ("earliest_replayable_version", "watermark")
PLOTTED = (dg.IntMetadataValue, dg.FloatMetadataValue)  # what Dagster plots on a check's page


def assert_plotted(
    result: dg.AssetCheckResult, ints: tuple[str, ...], floats: tuple[str, ...]
) -> None:
    """Exactly `ints` and `floats` are plotted (numeric); every other value is shown only."""
    for name in ints:
        assert isinstance(result.metadata[name], dg.IntMetadataValue), name
    for name in floats:
        assert isinstance(result.metadata[name], dg.FloatMetadataValue), name
    plotted = {name for name, value in result.metadata.items() if isinstance(value, PLOTTED)}
    assert plotted == {*ints, *floats}


@pytest.mark.parametrize(
    ("status", "passed", "severity"),
    [
        (HEALTHY, True, dg.AssetCheckSeverity.ERROR),
        (LOST, True, dg.AssetCheckSeverity.ERROR),
        (LAGGING, False, dg.AssetCheckSeverity.ERROR),
        (MISSING, False, dg.AssetCheckSeverity.WARN),
    ],
    ids=["healthy", "lost-but-recent", "lag-exceeded", "bronze-missing"],
)
def test_consumer_lag_fails_above_the_allowed_hours(
    status: PipelineStatus, passed: bool, severity: dg.AssetCheckSeverity
) -> None:
    result = consumer_lag_result(SPEC, status)
    assert (result.passed, result.severity) == (passed, severity)
    assert_plotted(result, LAG_FIGURES, ("lag_hours",))


def test_consumer_lag_figures_and_their_sentinel() -> None:
    figures = {k: v.value for k, v in consumer_lag_result(SPEC, LAGGING).metadata.items()}
    assert figures == {
        "version_lag": 3,
        "data_version_lag": 2,
        "lag_hours": 30.0,
        "watermark": 40,
        "latest_version": "43",
        "limit": "fails above 24 h (max_allowed_lag_hours)",
        "state": "OK",
    }
    missing = consumer_lag_result(SPEC, MISSING).metadata
    assert {missing[name].value for name in (*LAG_FIGURES, "lag_hours")} == {UNKNOWN}
    assert missing["latest_version"].value == "none"


def test_hours_are_rounded_to_two_decimals() -> None:
    status = replace(HEALTHY, lag_hours=0.000135900, headroom_hours=167.99962)
    assert consumer_lag_result(SPEC, status).metadata["lag_hours"].value == 0.0
    assert replay_window_result(SPEC, status).metadata["headroom_hours"].value == 168.0
    assert consumer_lag_result(SPEC, LOW).metadata["lag_hours"].value == 5.25


@pytest.mark.parametrize(
    ("status", "passed", "severity"),
    [
        (HEALTHY, True, dg.AssetCheckSeverity.ERROR),
        (LOW, False, dg.AssetCheckSeverity.WARN),
        (LOST, False, dg.AssetCheckSeverity.ERROR),
        (MISSING, False, dg.AssetCheckSeverity.WARN),
        (BLOCKED, False, dg.AssetCheckSeverity.ERROR),
    ],
    ids=["healthy", "low-headroom", "lost", "bronze-missing", "blocked"],
)
def test_replay_window_warns_on_low_headroom_and_errors_when_lost(
    status: PipelineStatus, passed: bool, severity: dg.AssetCheckSeverity
) -> None:
    result = replay_window_result(SPEC, status)
    assert (result.passed, result.severity) == (passed, severity)
    # No bronze, no headroom: the point is left out, never a placeholder.
    headroom = ("headroom_hours",) if status is not MISSING else ()
    assert_plotted(result, WINDOW_FIGURES, (*headroom, "retention_horizon_hours"))
    assert result.metadata["state"].value == status.state.value


def test_replay_window_figures_of_a_lost_window() -> None:
    result = replay_window_result(SPEC, LOST)
    figures = {k: v.value for k, v in result.metadata.items()}
    assert figures == {
        "earliest_replayable_version": 42,
        "watermark": 40,
        "headroom_hours": 0.0,
        "retention_horizon_hours": 168.0,
        "latest_version": "43",
        "replayable": False,
        "state": "LOST",
        "problem_code": "WATERMARK_OUTSIDE_RETENTION",
    }
    assert "41..43 cannot be replayed" in (result.description or "")
    healthy = replay_window_result(SPEC, HEALTHY).metadata
    assert (healthy["replayable"].value, healthy["problem_code"].value) == (True, "none")


def test_a_caught_up_pipeline_plots_its_retention_horizon_as_headroom() -> None:
    """Nothing waits to be replayed: the headroom is the horizon bronze's next commit will
    start with (never a placeholder that reads as negative hours, nor a 0 that reads as a
    closed window); without bronze there is none, and no point is plotted."""
    figures = replay_window_result(SPEC, CAUGHT_UP).metadata
    assert (figures["headroom_hours"].value, figures["retention_horizon_hours"].value) == (
        168.0,
        168.0,
    )
    assert replay_window_result(SPEC, CAUGHT_UP).passed
    missing = replay_window_result(SPEC, MISSING).metadata
    assert "headroom_hours" not in missing
    assert missing["retention_horizon_hours"].value == UNKNOWN


def test_a_headroom_limit_at_or_above_the_retention_horizon_is_named_as_never_met() -> None:
    """min_headroom_hours 200 against bronze's 168 h: every backlog would warn, so the check says
    the limit can never be met, caught up or not; a limit below the horizon gets no such word."""
    unmeetable = SPEC.model_copy(update={"min_headroom_hours": 200})
    for status in (CAUGHT_UP, replace(LOW, headroom_hours=150.0)):
        description = replay_window_result(unmeetable, status).description or ""
        assert "min_headroom_hours 200 h can never be met" in description, description
        assert "keeps changes for 168.00 h" in description, description
    assert "never be met" not in (replay_window_result(SPEC, CAUGHT_UP).description or "")


FOREIGN = replace(
    HEALTHY,
    foreign_writes=(ForeignWrite(12, "UPDATE", 0), ForeignWrite(13, "DELETE", 0)),
    foreign_writes_baseline="verified v11",
)


@pytest.mark.parametrize(
    ("fallback_mode", "severity"),
    [("SNAPSHOT_REBUILD", dg.AssetCheckSeverity.WARN), ("FAIL_FAST", dg.AssetCheckSeverity.ERROR)],
)
def test_foreign_writes_warn_or_error_under_fail_fast_with_their_count_plotted(
    fallback_mode: str, severity: dg.AssetCheckSeverity
) -> None:
    spec = PipelineSpec.model_validate({**SPEC.model_dump(), "fallback_mode": fallback_mode})
    result = foreign_writes_result(spec, FOREIGN)
    assert (result.passed, result.severity) == (False, severity)
    assert_plotted(result, ("foreign_write_count",), ())
    figures = {k: v.value for k, v in result.metadata.items()}
    assert figures == {
        "foreign_write_count": 2,
        "foreign_writes": "v12 UPDATE, v13 DELETE",
        "baseline": "verified v11",
        "note": "none",
    }
    assert "v12 UPDATE, v13 DELETE" in (result.description or "")
    clean = foreign_writes_result(spec, replace(HEALTHY, foreign_writes_baseline="rebuild v1"))
    assert clean.passed and clean.metadata["foreign_write_count"].value == 0
