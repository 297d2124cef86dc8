"""A Debezium-shaped change-event log for tests: events (`op`, `before`/`after`, `ts_ms`)
appended to a bronze Delta table, and the fold of every event ever appended (the oracle silver
is checked against)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

IMAGE = "STRUCT<id: INT, name: STRING, amount: INT>"
SCHEMA = f"before {IMAGE}, after {IMAGE}, op STRING, ts_ms BIGINT"
DEBEZIUM = {
    "operation": "op",
    "upserts": ["c", "u", "r"],
    "deletes": ["d"],
    "row": "coalesce(after, before)",
}


@dataclass(frozen=True)
class Event:
    """One source change as Debezium writes it."""

    op: str
    id: int
    ts: int
    name: str | None = None
    amount: int | None = None

    def as_row(self) -> tuple[Any, ...]:
        image = (self.id, self.name, self.amount)
        if self.op == "d":
            return (image, None, "d", self.ts)
        return (None, image, self.op, self.ts)


class EventLog:
    """Bronze (an append-only Delta table with its change feed on) and every event ever
    appended to it, for the oracle."""

    def __init__(self, spark: SparkSession, path: str) -> None:
        self.spark, self.path = spark, path
        self.written: list[Event] = []
        spark.sql(
            f"CREATE TABLE delta.`{path}` ({SCHEMA.replace(': ', ' ')}) USING DELTA "
            "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
        )

    def append(self, *events: Event) -> None:
        """One bronze commit holding `events`."""
        frame = self.spark.createDataFrame([e.as_row() for e in events], SCHEMA)
        frame.write.format("delta").mode("append").save(self.path)
        self.written.extend(events)

    def latest(self) -> dict[int, Event]:
        """Each key's event with the highest sequence value (ties never written here)."""
        found: dict[int, Event] = {}
        for event in self.written:
            if event.id not in found or event.ts > found[event.id].ts:
                found[event.id] = event
        return found

    def scd1(self, delete_mode: str) -> list[tuple[Any, ...]]:
        """Silver as the fold of every event: (id, name, amount, ts_ms[, _is_deleted]). A
        soft-deleted row shows its key, the delete's sequence value and the flag (its values
        are those it held when the delete was applied)."""
        expected = []
        for key, last in self.latest().items():
            if last.op != "d":
                row: tuple[Any, ...] = (key, last.name, last.amount, last.ts)
                expected.append((*row, False) if delete_mode == "soft" else row)
            elif delete_mode == "soft":
                expected.append((key, None, None, last.ts, True))
        return sorted(expected, key=lambda v: v[0])

    def scd2(self) -> list[tuple[Any, ...]]:
        """SCD2 as the fold of every event: (id, name, amount, __start_at, __end_at); every
        upsert opens a version (its `ts_ms`, a tracked column, differs), a delete closes one."""
        by_key: dict[int, list[Event]] = defaultdict(list)
        for event in self.written:
            by_key[event.id].append(event)
        versions = []
        for key, events in by_key.items():
            ordered = sorted(events, key=lambda e: e.ts)
            for index, event in enumerate(ordered):
                if event.op == "d":
                    continue
                following = ordered[index + 1] if index + 1 < len(ordered) else None
                end = following.ts if following is not None else None
                versions.append((key, event.name, event.amount, event.ts, end))
        return sorted(versions, key=lambda v: (v[0], v[3]))
