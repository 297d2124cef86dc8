"""The idle-cost benchmark reads the streaming peer's idle figure from the fleet report."""

import json
from pathlib import Path

import pytest

from bench.idle_cost import PEER_IDLE_SCENARIO, RESULTS, peer_idle_per_minute


def test_the_peers_idle_cost_is_read_per_minute_from_the_fleet_report(tmp_path: Path) -> None:
    figure = {
        "scenario": PEER_IDLE_SCENARIO,
        "measured": "27.5 / 16.0",
        "detail": "over 120 s and 90 s with no commit",
    }
    (tmp_path / "freshness_fleet.json").write_text(json.dumps({"figures": [figure]}))
    assert peer_idle_per_minute(tmp_path / "freshness_fleet.json") == pytest.approx(60 * 16.0 / 90)
    assert peer_idle_per_minute(tmp_path / "none.json") is None


def test_the_published_fleet_report_has_the_peers_idle_figure() -> None:
    peer = peer_idle_per_minute(RESULTS / "freshness_fleet.json")
    assert peer is not None and peer > 0
