"""The fleet freshness benchmark's pure parts: the commit stream and its replay, the peer's log,
the CPU between two marks and by kind of process, and the side-by-side table (no Spark, no
deployment)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from bench.commit_stream import PlannedCommit, StreamWriter, load_stream, plan_commits, save_stream
from bench.fleet_freshness import PassFigures, side_by_side
from bench.fleet_lake import EventLogWriter, SourceKind, fleet_ids
from bench.process_meter import ProcessMeter, cpu_between, cpu_by_kind
from bench.streaming_peer import PeerBatch, applied_versions, peer_freshness, read_peer_log
from cdf_platform_testkit.deployment import Commit


def test_a_seed_gives_the_same_stream_and_another_seed_another() -> None:
    ids = [f"f{i:03d}" for i in range(1, 101)]
    first = plan_commits(ids, interval=1.0, minutes=10, seed=11)
    assert first == plan_commits(ids, interval=1.0, minutes=10, seed=11)
    assert len(first) == 600 and first[-1].offset == 599.0
    assert first != plan_commits(ids, interval=1.0, minutes=10, seed=12)


def test_the_stream_as_played_replays_the_same_tables_in_order(tmp_path: Path) -> None:
    stream = [PlannedCommit(0.0, "a"), PlannedCommit(0.05, "b"), PlannedCommit(0.1, "a")]
    versions: dict[str, int] = {}

    def write(pipeline_id: str) -> int:
        versions[pipeline_id] = versions.get(pipeline_id, 0) + 1
        return versions[pipeline_id]

    first = StreamWriter(stream, write).start()
    first.join(timeout=10)
    saved = load_stream(save_stream(tmp_path / "stream.json", first.played))
    versions.clear()
    started = time.monotonic()
    second = StreamWriter(saved, write).start()
    second.join(timeout=10)
    assert [c.pipeline_id for c in second.played] == ["a", "b", "a"]
    assert [(c.pipeline_id, c.version) for c in second.commits] == [
        (c.pipeline_id, c.version) for c in first.commits
    ]
    # Played at the recorded offsets, not all at once.
    assert time.monotonic() - started >= saved[-1].offset


def test_an_event_log_writer_is_deterministic_given_its_history(tmp_path: Path) -> None:
    one, two = EventLogWriter(tmp_path / "a", "f001"), EventLogWriter(tmp_path / "b", "f001")
    batches = [one.events(50) for _ in range(3)]
    assert batches == [two.events(50) for _ in range(3)]
    later = batches[1]
    assert [e["op"] for e in later].count("u") == 30 and [e["op"] for e in later].count("d") == 5
    assert all(e["before"] is not None for e in later if e["op"] == "d")


def test_the_fleet_mix_is_seventy_twenty_ten() -> None:
    kinds = list(fleet_ids(100).values())
    assert [kinds.count(k) for k in SourceKind] == [70, 20, 10]


def test_the_peer_log_skips_a_line_cut_short_and_covers_each_commit_once(tmp_path: Path) -> None:
    log = tmp_path / "peer.jsonl"
    rows = [PeerBatch("a", 0, 1, 50, 9.0, 10.0), PeerBatch("a", 1, 3, 100, 13.0, 14.0)]
    log.write_text("".join(json.dumps(r.__dict__) + "\n" for r in rows) + '{"table": "a", "ba')
    batches = read_peer_log(log)
    assert batches == rows and applied_versions(batches) == {"a": 3}
    commits = [Commit("a", 2, 11.0), Commit("a", 3, 12.5), Commit("a", 4, 13.0)]
    # Version 4 was never applied: left out.
    assert peer_freshness(commits, batches) == [3.0, 1.5]


def test_cpu_between_marks_counts_growth_and_new_processes_from_zero() -> None:
    earlier = {(10, 1): 5.0, (11, 1): 2.0}
    later = {(10, 1): 7.5, (11, 1): 2.0, (12, 40): 1.0}
    assert cpu_between(earlier, later) == 3.5


# A parent that waits for a child burning a second of CPU.
_PARENT = """
import subprocess, sys
busy = "import time\\nstart = time.process_time()\\nwhile time.process_time() - start < 1.0: pass"
subprocess.run([sys.executable, "-c", busy], check=True)
"""


def test_the_meter_files_a_roots_descendants_apart_from_it() -> None:
    parent = subprocess.Popen([sys.executable, "-c", _PARENT])
    meter = ProcessMeter(
        lambda: [parent.pid] if parent.poll() is None else [],
        every=0.05,
        names=lambda: {parent.pid: "parent"},
    ).start()
    try:
        before = {key: 0.0 for key in meter.mark()}
        parent.wait(timeout=30)
        after = meter.mark()
    finally:
        meter.stop()
    spent = cpu_by_kind(before, after, meter.kinds())
    assert set(spent) == {"parent", "parent: children"}, spent
    # The child's second, less the last sample interval before it exited; the parent waited.
    assert spent["parent: children"] > 0.5 > spent["parent"], spent
    assert cpu_by_kind({}, {(1, 2): 1.0}, {}) == {"other": 1.0}


def test_the_side_by_side_table_gives_each_ratio_ours_over_the_peer() -> None:
    ours = PassFigures("ours", 10, [4.0, 6.0, 8.0], 20.0, 3.0, 60.0, 2 * 2**30, [0.5])
    peer = PassFigures("peer", 10, [1.0, 2.0, 4.0], 40.0, 12.0, 60.0, 2**30, [0.5])
    table = {row["figure"]: row for row in side_by_side(ours, peer)}
    assert table["commit -> silver, p50 (s)"]["ours / peer"] == "3.00"
    assert table["CPU seconds per commit"]["ours"] == "2.00"
    assert table["CPU seconds per commit"]["ours / peer"] == "0.50"
    assert table["resident memory peak (GiB)"]["ours / peer"] == "2.00"
    assert table["idle CPU seconds per minute"]["ours / peer"] == "0.25"
    nothing = PassFigures("peer", 0, [], 0.0, 0.0, 0.0, 0, [0.5])
    assert side_by_side(ours, nothing)[0]["ours / peer"] == "n/a"
