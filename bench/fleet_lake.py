"""The fleet freshness benchmark's pipelines: a fixed mix of SCD1, SCD2 and change-event-log
sources, and one writer of a batch for each kind, deterministic given the table's history.

Every tenth pipeline (its index ending in 0) reads a Debezium-shaped event log, two in ten
(indexes ending in 1 or 2) keep SCD2 history, the rest are SCD1: 70% / 20% / 10% at 100
pipelines. The SCD1 and SCD2 bronze tables are `orders` tables (`write_orders_batch`: 50
rows, about 60% updates, 30% inserts, 10% deletes, seeded by table and batch); an event-log
bronze is an append-only Delta table (change feed on) of events `op`, `before`, `after`,
`ts_ms` written by deltalake, its batches drawn with the same shares from the keys the log has
made live, seeded by table and batch.

Example:
    >>> [kind_of(i).value for i in range(4)]
    ['events', 'scd2', 'scd2', 'scd1']
    >>> fleet_pipeline("f001", SourceKind.EVENTS)["changes"]
    'events'
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.orders_bronze import write_orders_batch

KEY = "order_id"
SEQUENCE = "ts_ms"
# How a Debezium event reads (the event-source tests' shape).
DEBEZIUM = {
    "operation": "op",
    "upserts": ["c", "u", "r"],
    "deletes": ["d"],
    "row": "coalesce(after, before)",
}
# The row image of an event-log table: silver's columns besides `ts_ms`.
IMAGE_COLUMNS = ("order_id", "customer_id", "amount_cents", "status")
STATUSES = ("placed", "paid", "shipped", "delivered", "returned")


class SourceKind(StrEnum):
    """What a fleet pipeline's bronze is and what its silver keeps."""

    SCD1 = "scd1"
    """A demo `orders` table (change feed on) into current rows."""
    SCD2 = "scd2"
    """The same bronze into every version (`history: scd2`)."""
    EVENTS = "events"
    """A change-event log (`changes: events`) into current rows."""


def kind_of(index: int) -> SourceKind:
    """The kind of the fleet's pipeline number `index` (from 0): 10% events, 20% SCD2."""
    digit = index % 10
    if digit == 0:
        return SourceKind.EVENTS
    return SourceKind.SCD2 if digit in (1, 2) else SourceKind.SCD1


def fleet_ids(count: int) -> dict[str, SourceKind]:
    """The fleet's `count` pipelines: id -> kind."""
    return {f"f{i + 1:03d}": kind_of(i) for i in range(count)}


def fleet_pipeline(pipeline_id: str, kind: SourceKind) -> dict[str, Any]:
    """The pipelines-file entry of a fleet pipeline of `kind`."""
    if kind is SourceKind.SCD2:
        return orders_pipeline(pipeline_id, history="scd2")
    if kind is SourceKind.EVENTS:
        return orders_pipeline(pipeline_id, changes="events", events=DEBEZIUM, sequence_by=SEQUENCE)
    return orders_pipeline(pipeline_id)


@dataclass
class EventLogWriter:
    """Batches of change events appended to one event-log bronze table, deterministic given
    `seed`, the table's id and its batch count (the writer keeps the live keys itself: the same
    sequence of batches gives the same events in a fresh table)."""

    path: Path
    table: str
    seed: int = 7
    batches: int = 0
    live: list[int] = field(default_factory=list)
    next_key: int = 1

    def events(self, batch_size: int) -> list[dict[str, Any]]:
        """The next batch's events (and the live keys after it); the first batch inserts."""
        rng = random.Random(f"{self.seed}:{self.table}:{self.batches}")
        if self.live:
            n_update = min(len(self.live), batch_size * 6 // 10)
            n_delete = min(len(self.live) - n_update, batch_size // 10)
        else:
            n_update = n_delete = 0
        touched = rng.sample(self.live, n_update + n_delete)
        inserts = list(range(self.next_key, self.next_key + batch_size - n_update - n_delete))
        base = self.batches * 1_000_000
        events = []
        for position, (op, key) in enumerate(
            [*(("u", k) for k in touched[:n_update]), *(("c", k) for k in inserts)]
            + [("d", k) for k in touched[n_update:]]
        ):
            image = {
                "order_id": key,
                "customer_id": rng.randrange(1, 1_000),
                "amount_cents": rng.randrange(100, 100_000),
                "status": rng.choice(STATUSES),
            }
            events.append(
                {
                    "before": image if op == "d" else None,
                    "after": None if op == "d" else image,
                    "op": op,
                    SEQUENCE: base + position,
                }
            )
        gone = set(touched[n_update:])
        self.live = sorted({*self.live, *inserts} - gone)
        self.next_key += len(inserts)
        self.batches += 1
        return events

    def write(self, batch_size: int) -> int:
        """Append the next batch as one commit (creating the table, change feed on, first);
        return the commit's version."""
        import pyarrow as pa  # type: ignore[import-untyped]  # (no stubs; deltalake brings it)
        from deltalake import DeltaTable, write_deltalake

        image = pa.struct(
            [
                ("order_id", pa.int64()),
                ("customer_id", pa.int64()),
                ("amount_cents", pa.int64()),
                ("status", pa.string()),
            ]
        )
        schema = pa.schema(
            [("before", image), ("after", image), ("op", pa.string()), (SEQUENCE, pa.int64())]
        )
        rows = pa.Table.from_pylist(self.events(batch_size), schema=schema)
        write_deltalake(
            str(self.path),
            rows,
            mode="append",
            configuration={"delta.enableChangeDataFeed": "true"},
        )
        return int(DeltaTable(str(self.path)).version())


class FleetLake:
    """The bronze tables of a fleet under `lake` (`bronze/<id>`), written one batch at a time."""

    def __init__(
        self, lake: Path, pipelines: dict[str, SourceKind], *, batch_size: int = 50
    ) -> None:
        self.lake, self.pipelines, self.batch_size = lake, dict(pipelines), batch_size
        self._events = {
            pipeline_id: EventLogWriter(self.bronze(pipeline_id), pipeline_id)
            for pipeline_id, kind in pipelines.items()
            if kind is SourceKind.EVENTS
        }

    def bronze(self, pipeline_id: str) -> Path:
        return self.lake / "bronze" / pipeline_id

    def silver(self, pipeline_id: str) -> Path:
        return self.lake / "silver" / pipeline_id

    def write(self, pipeline_id: str) -> int:
        """One batch to `pipeline_id`'s bronze now; the commit's version."""
        if pipeline_id in self._events:
            return self._events[pipeline_id].write(self.batch_size)
        batch = write_orders_batch(str(self.bronze(pipeline_id)), batch_size=self.batch_size)
        return batch.version
