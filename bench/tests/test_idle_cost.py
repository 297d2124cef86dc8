"""The idle-cost benchmark reads the streaming peer's idle figure from the fleet report."""

import json
from pathlib import Path

import pytest

from bench.fleet_freshness import IDLE_PER_MINUTE, SIDE_BY_SIDE
from bench.idle_cost import RESULTS, peer_idle_per_minute


def test_the_peers_idle_cost_is_read_per_minute_from_the_fleet_report(tmp_path: Path) -> None:
    row = {"figure": IDLE_PER_MINUTE, "ours": "13.76", "peer": "8.01", "ours / peer": "1.72"}
    report = {"tables": {SIDE_BY_SIDE: [{"figure": "CPU seconds per commit"}, row]}}
    (tmp_path / "freshness_fleet.json").write_text(json.dumps(report))
    assert peer_idle_per_minute(tmp_path / "freshness_fleet.json") == pytest.approx(8.01)
    assert peer_idle_per_minute(tmp_path / "none.json") is None


def test_the_published_fleet_report_has_the_peers_idle_figure() -> None:
    peer = peer_idle_per_minute(RESULTS / "freshness_fleet.json")
    assert peer is not None and peer > 0
