"""The idle-cost benchmark reads the streaming peer's idle figure from the fleet report, and
places its idle window between two ticks of the checks schedule."""

import json
from pathlib import Path

import pytest

from bench.fleet_freshness import IDLE_PER_MINUTE, SIDE_BY_SIDE
from bench.idle_cost import RESULTS, peer_idle_per_minute
from bench.idle_window import SCHEDULED_RUN_S, seconds_until_idle_window
from cdf_platform.orchestration.jobs.silver_jobs import CHECKS_EVERY_MINUTES


def test_the_peers_idle_cost_is_read_per_minute_from_the_fleet_report(tmp_path: Path) -> None:
    row = {"figure": IDLE_PER_MINUTE, "ours": "13.76", "peer": "8.01", "ours / peer": "1.72"}
    report = {"tables": {SIDE_BY_SIDE: [{"figure": "CPU seconds per commit"}, row]}}
    (tmp_path / "freshness_fleet.json").write_text(json.dumps(report))
    assert peer_idle_per_minute(tmp_path / "freshness_fleet.json") == pytest.approx(8.01)
    assert peer_idle_per_minute(tmp_path / "none.json") is None


def test_the_published_fleet_report_has_the_peers_idle_figure() -> None:
    peer = peer_idle_per_minute(RESULTS / "freshness_fleet.json")
    assert peer is not None and peer > 0


@pytest.mark.parametrize("minutes", [0.5, 2.0, 10.0])
def test_the_idle_window_holds_no_tick_of_the_checks_schedule_nor_its_run(minutes: float) -> None:
    period = CHECKS_EVERY_MINUTES * 60
    for second in range(0, 2 * period, 7):
        now = 1_000 * period + second
        start = now + seconds_until_idle_window(minutes, now)
        end = start + minutes * 60
        since_tick = start % period
        assert since_tick >= SCHEDULED_RUN_S, (second, start)
        assert since_tick + minutes * 60 <= period, (second, start)
        assert start - now < period, second  # never a whole period waited
        assert (end // period) == (start // period), second
    with pytest.raises(ValueError, match="cannot fit"):
        seconds_until_idle_window(period / 60, 0.0)
