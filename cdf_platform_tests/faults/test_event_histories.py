"""Generated histories of the two bronze kinds without a plain change feed, each run checked
against an oracle that knows nothing of the platform:

- an event log (`changes: events`): random Debezium-shaped commits (several events of one key,
  the same event delivered twice, events arriving late, deletes), bronze retention DELETEs and
  OPTIMIZEs, and a VACUUM that loses the window; silver must be the fold of every event ever
  appended after every run and every rebuild;
- a snapshot source (`changes: snapshots`): random dumps overwriting bronze whole (no change
  feed); silver must be the latest dump after every run.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from pyspark.sql import SparkSession

from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform_tests.bronze import BRONZE_SCHEMA, control_for, rows, spec_for
from cdf_platform_tests.event_log import DEBEZIUM, DeltaRsEventLog, Event

pytestmark = pytest.mark.long(minutes=2)

KEYS = range(1, 9)
NAMES = ("ada", "bob", "cy", "dee", "eve")


class EventSource:
    """Draws events: sequence values strictly unique per key (a tie is bad input, refused
    elsewhere), mostly increasing, some late (below the key's latest)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.clock = 1000
        self.used: set[tuple[int, int]] = set()
        self.drawn: list[Event] = []

    def _sequence(self, key: int) -> int:
        if self.drawn and self.rng.random() < 0.2:  # late: older than what was written
            candidate = self.rng.randrange(1, self.clock)
        else:
            self.clock += self.rng.randrange(1, 20)
            candidate = self.clock
        while (key, candidate) in self.used:
            candidate += 1
        self.used.add((key, candidate))
        return candidate

    def commit(self) -> list[Event]:
        """1-6 events, sometimes several of one key, sometimes one delivered twice."""
        events: list[Event] = []
        for _ in range(self.rng.randrange(1, 7)):
            if events and self.rng.random() < 0.1:
                events.append(self.rng.choice(events))  # delivered twice
                continue
            key = self.rng.choice(KEYS)
            op = self.rng.choice("ccuuud")
            events.append(
                Event(op, key, self._sequence(key), self.rng.choice(NAMES), self.rng.randrange(100))
            )
        self.drawn.extend(events)
        return events


@pytest.mark.parametrize(
    ("seed", "history", "delete_mode"),
    [(11, "scd1", "hard"), (12, "scd1", "soft"), (13, "scd2", "hard")],
)
def test_a_generated_event_log_folds_exactly_after_every_run_and_rebuild(
    spark: SparkSession, lake: Path, seed: int, history: str, delete_mode: str
) -> None:
    rng = random.Random(seed)
    spec = spec_for(
        lake,
        changes="events",
        events=DEBEZIUM,
        sequence_by="ts_ms",
        history=history,
        delete_mode=delete_mode,
        fallback_mode="SNAPSHOT_REBUILD",
    )
    control = control_for(lake)
    # Bronze is written with deltalake: these histories are about the platform's fold (the
    # same operations written by Spark: cdf_platform_tests/runner/test_event_source.py).
    log = DeltaRsEventLog(spark, spec.source)
    source = EventSource(rng)
    modes: list[RunMode] = []
    lose_at = rng.randrange(2, 4)
    for step in range(5):
        for _ in range(rng.randrange(1, 3)):
            log.append(*source.commit())
        if step and rng.random() < 0.5:
            # Retention: the oldest events go; sometimes the table is compacted too.
            cutoff = sorted(e.ts for e in log.written)[len(log.written) // 3]
            log.delete(f"ts_ms < {cutoff}")
            if rng.random() < 0.5:
                log.optimize()
        if step == lose_at:
            # The OPTIMIZE rewrites the last append's file, the VACUUM deletes it: lost.
            log.append(*source.commit())
            log.optimize()
            log.vacuum_retain_zero()
        result = PipelineRunner.on(control, lambda: spark).run(spec)
        modes.append(result.mode)
        log.check(spark, spec)
    assert modes[0] is RunMode.INITIAL_LOAD
    assert RunMode.REBUILD in modes and RunMode.INCREMENTAL in modes, modes


def test_generated_dumps_of_a_snapshot_source_reach_silver_exactly(
    spark: SparkSession, lake: Path
) -> None:
    rng = random.Random(21)
    spec = spec_for(lake, changes="snapshots", delete_mode="soft")
    control = control_for(lake)
    dump: dict[int, tuple[Any, ...]] = {}
    for _ in range(5):
        for key in rng.sample(list(KEYS), 4):
            if key in dump and rng.random() < 0.3:
                del dump[key]
            else:
                dump[key] = (key, rng.choice(NAMES), rng.randrange(100))
        batch = [dict(zip(BRONZE_SCHEMA.names, row, strict=True)) for row in dump.values()]
        write_deltalake(
            spec.source, pa.Table.from_pylist(batch, schema=BRONZE_SCHEMA), mode="overwrite"
        )
        PipelineRunner.on(control, lambda: spark).run(spec)
        live = rows(spark, spec.target, "id", "name", "amount", "_is_deleted")
        assert [r[:3] for r in live if not r[3]] == sorted(dump.values())
        assert {r[0] for r in live if r[3]}.isdisjoint(dump)
