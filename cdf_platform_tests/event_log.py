"""A Debezium-shaped change-event log for tests: events (`op`, `before`/`after`, `ts_ms`)
appended to a bronze Delta table, and the fold of every event ever appended (the oracle silver
is checked against). `EventLog` writes bronze with Spark; `DeltaRsEventLog` writes the same
bronze with deltalake (delta-rs) after Spark's CREATE, and reads silver with it."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.spec.modes import DeleteMode, HistoryMode
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform_tests.bronze import deltalake_insert, rows

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
        if self.op == "t":  # a truncate: no row
            return (None, None, "t", self.ts)
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

    def truncated_at(self) -> int | None:
        """The sequence value of the latest truncate (`t`), if any."""
        return max((e.ts for e in self.events() if e.op == "t"), default=None)

    def latest(self) -> dict[int, Event]:
        """Each key's event with the highest sequence value (ties never written here), among
        the events newer than the latest truncate."""
        found: dict[int, Event] = {}
        after = self.truncated_at()
        for event in self.events():
            if event.op == "t" or (after is not None and event.ts <= after):
                continue
            if event.id not in found or event.ts > found[event.id].ts:
                found[event.id] = event
        return found

    def events(self) -> list[Event]:
        """Every event appended, the same event delivered twice counted once."""
        return list(dict.fromkeys(self.written))

    def scd1(self) -> list[tuple[Any, ...]]:
        """Silver's live rows as the fold of every event: (id, name, amount, ts_ms) of each key
        whose latest event is an upsert."""
        live = [
            (key, last.name, last.amount, last.ts)
            for key, last in self.latest().items()
            if last.op != "d"
        ]
        return sorted(live)

    def deleted(self) -> dict[int, int]:
        """Key -> the sequence value of its latest event, for keys whose latest is a delete, or
        of the latest truncate, for keys with no event after it."""
        truncated = self.truncated_at()
        gone = {
            e.id: truncated
            for e in self.events()
            if e.op != "t" and truncated is not None and e.ts <= truncated
        }
        latest = self.latest()
        gone = {key: ts for key, ts in gone.items() if key not in latest}
        return {**gone, **{key: last.ts for key, last in latest.items() if last.op == "d"}}

    def check(self, spark: SparkSession, spec: PipelineSpec) -> None:
        """Assert silver at `spec.target` is the fold of every event: SCD2's versions, or SCD1's
        live rows; a soft-deleted row is allowed only for a key whose latest event is a delete,
        and carries that delete's sequence value (its other values are those it held when the
        delete was applied; a key deleted before silver held it has no row)."""
        if spec.history is HistoryMode.SCD2:
            columns = ["id", "name", "amount", "__start_at", "__end_at"]
            found = sorted(self.silver_rows(spark, spec.target, columns), key=_by_start)
            assert found == self.scd2()
            return
        soft = spec.delete_mode is DeleteMode.SOFT
        columns = ["id", "name", "amount", "ts_ms", *(["_is_deleted"] if soft else [])]
        found = self.silver_rows(spark, spec.target, columns)
        assert sorted(r[:4] for r in found if not soft or not r[4]) == self.scd1()
        deleted, tombstoned = self.deleted(), {r[0]: r[3] for r in found if soft and r[4]}
        assert all(deleted.get(key) == ts for key, ts in tombstoned.items()), (tombstoned, deleted)

    def scd2(self) -> list[tuple[Any, ...]]:
        """SCD2 as the fold of every event: (id, name, amount, __start_at, __end_at); every
        upsert opens a version (its `ts_ms`, a tracked column, differs), a delete closes one."""
        by_key: dict[int, list[Event]] = defaultdict(list)
        for event in self.events():
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
        return sorted(versions, key=_by_start)

    def silver_rows(
        self, spark: SparkSession, target: str, columns: list[str]
    ) -> list[tuple[Any, ...]]:
        """Tuples of `columns` of every row of silver at `target`, read with Spark."""
        frame = spark.read.format("delta").load(target)
        return [tuple(r) for r in frame.select(*columns).collect()]


class DeltaRsEventLog(EventLog):
    """An `EventLog` whose bronze commits after Spark's CREATE (so its protocol, schema and
    properties are the same) are written with deltalake, as are an operator's retention
    DELETE, OPTIMIZE and VACUUM, and whose checks read silver with deltalake.

    For histories about the platform's fold: the same bronze operations written by Spark are
    covered in cdf_platform_tests/runner/test_event_source.py.
    """

    def append(self, *events: Event) -> None:
        """One bronze commit holding `events`."""
        deltalake_insert(self.path, [e.as_row() for e in events])
        self.written.extend(events)

    def delete(self, predicate: str) -> None:
        """`DELETE WHERE predicate` (no commit when no row matches): its change feed holds
        deletes only."""
        DeltaTable(self.path).delete(predicate)

    def optimize(self) -> None:
        """Compact bronze's files (dataChange=false: nothing in the change feed)."""
        DeltaTable(self.path).optimize.compact()

    def vacuum_retain_zero(self) -> None:
        """`cdf_platform_testkit.vacuum.vacuum_retain_zero`: VACUUM with zero retention every
        file the current version does not need, change files included (`full`). The files of
        the appends an OPTIMIZE rewrote go, and with them the window of a run that would still
        read them."""
        DeltaTable(self.path).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True
        )

    def silver_rows(
        self, spark: SparkSession, target: str, columns: list[str]
    ) -> list[tuple[Any, ...]]:
        """Tuples of `columns` of every row of silver at `target`, as `bronze.rows` reads them
        (with deltalake, deletion vectors applied, where it reads silver as Spark does)."""
        return rows(spark, target, *columns)


def _by_start(version: tuple[Any, ...]) -> tuple[Any, ...]:
    return (version[0], version[3])
