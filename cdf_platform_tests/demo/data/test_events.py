"""The demo's change-event log: deterministic Debezium-shaped batches (one commit each, CDF on)
holding inserts, updates, deletes, several events of a key and late events, never two events of
a key with one `ts_ms`; and its fold, the story's oracle, is what the platform's silver holds."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.spec.spec_file import load_specs
from cdf_platform.demo.data.events import (
    DELETES,
    IMAGE_SCHEMA,
    ChangeEvent,
    folded_rows,
    read_events,
    write_event_batch,
)
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import rows

REPO = Path(__file__).resolve().parents[3]
BATCHES = 5


def _write(path: str, batches: int, *, batch_size: int = 60, seed: int = 7) -> None:
    for _ in range(batches):
        write_event_batch(path, batch_size=batch_size, seed=seed)


def _commits(path: str) -> list[list[ChangeEvent]]:
    """Each commit's events, from the table's change feed read by deltalake (every row of it
    an `insert`: the log is append-only)."""
    table = DeltaTable(path)
    feed = table.load_cdf(starting_version=1, ending_version=table.version()).read_all()
    found: list[list[ChangeEvent]] = [[] for _ in range(table.version())]
    columns = [feed.column(name).to_pylist() for name in ("before", "after", "op", "ts_ms")]
    kinds, versions = feed.column("_change_type").to_pylist(), feed.column("_commit_version")
    assert set(kinds) == {"insert"}
    for version, (before, after, op, ts_ms) in zip(
        versions.to_pylist(), zip(*columns, strict=True), strict=True
    ):
        found[version - 1].append(ChangeEvent(op, ts_ms, before, after))
    return found


def _comparable(events: list[ChangeEvent]) -> list[tuple[Any, ...]]:
    return sorted((e.op, e.ts_ms, repr(e.before), repr(e.after)) for e in events)


def test_the_same_seed_writes_the_same_events_and_another_seed_others(tmp_path: Path) -> None:
    written = {}
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        path = str(tmp_path / name)
        _write(path, 3, seed=seed)
        written[name] = _comparable(read_events(path))
    assert written["a"] == written["b"]
    assert written["a"] != written["c"]


def test_every_batch_is_one_commit_with_the_event_log_shapes(tmp_path: Path) -> None:
    path = str(tmp_path / "accounts_cdc")
    _write(path, BATCHES)
    table = DeltaTable(path)
    assert table.version() == BATCHES  # version 0 creates the table
    assert table.metadata().configuration["delta.enableChangeDataFeed"] == "true"
    first, *later = _commits(path)

    # A snapshot first: one `r` per key, the row in `after`.
    assert {e.op for e in first} == {"r"} and len(first) == 60
    assert all(e.before is None and set(e.image) == set(IMAGE_SCHEMA) for e in first)

    newest: dict[int, ChangeEvent] = {e.key: e for e in first}  # each key's, so far
    several = late = late_after_delete = 0
    for batch in later:
        assert {e.op for e in batch} == {"c", "u", "d"}
        for event in batch:
            # c: the row in `after`; u: in `after`, the old one (or NULL) in `before`; d: the
            # row in `before`, `after` NULL.
            assert (event.after is None) is (event.op in DELETES)
            assert set(event.image) == set(IMAGE_SCHEMA)
            if event.op == "c":
                assert event.before is None
        by_key: dict[int, list[ChangeEvent]] = defaultdict(list)
        for event in batch:
            by_key[event.key].append(event)
        several += sum(len(events) > 1 for events in by_key.values())
        for key, events in by_key.items():
            times = [e.ts_ms for e in events]
            assert len(set(times)) == len(times)  # a key's events in one batch: no tie
            if key in newest and min(times) < newest[key].ts_ms:
                late += 1
                late_after_delete += newest[key].op in DELETES
            newest[key] = max([*events, newest.get(key, events[0])], key=lambda e: e.ts_ms)
    assert several >= len(later) and late >= len(later)
    assert late_after_delete >= 1  # a late event of a key bronze already deleted

    # Never two events of one key with one ts_ms, in the whole log.
    keyed = [(e.key, e.ts_ms) for e in read_events(path)]
    assert len(set(keyed)) == len(keyed)


def test_the_fold_is_what_the_platform_makes_of_the_demo_event_log(
    spark: SparkSession, lake: Path
) -> None:
    """The story's oracle against the platform itself, on the demo's own `accounts` spec:
    incremental runs (late events, several per key), then a rebuild and late events of keys it
    deleted (its tombstones)."""
    (spec,) = [
        s for s in load_specs(REPO / "pipelines.yaml", lake_root=str(lake)) if s.id == "accounts"
    ]
    control = ControlTable(str(lake / "_control"))
    columns = [*IMAGE_SCHEMA, "ts_ms"]

    def write_run_and_compare(force_rebuild: bool = False) -> None:
        write_event_batch(spec.source, batch_size=40)
        PipelineRunner.on(control, lambda: spark).run(spec, force_rebuild=force_rebuild)
        expected = sorted(folded_rows(spec.source, columns).elements())
        assert rows(spark, spec.target, *columns) == expected

    for _ in range(3):
        write_run_and_compare()
    write_run_and_compare(force_rebuild=True)
    write_run_and_compare()
