"""The history oracle: what an SCD2 silver ordered and dated by `sequence_by` (`history: scd2`,
`sequence_by: seq`, hard deletes) must hold after each consumer run, computed in plain Python
from every change of a key the pipeline has seen, never from the platform's SQL.

Rules (docs/pipeline-spec.md "History (SCD type 2)", the contract the platform implements):
1. Events. Each bronze change of a key is an event after the pipeline's conforming steps
   (`cdf_platform_testkit.faults.change_oracle.conform_row`: transform, derived columns; a row
   `where` does not keep is a delete; an UPDATE of the key column is a delete of the old key):
   sequence value s (the row's `seq`; a delete's is the deleted row's), commit version v, kind
   insert / update / delete, and the row's values. One event per key per bronze commit
   (`VersionRecord.changes`).
2. Fold. A key's events in (s, generation, v) order give its history (the source generation
   goes up with a rebuild that does not move the watermark forward): a non-delete event when
   the key is absent (first, or after a delete) opens a version at s; when present, one whose
   tracked values (every value column: the data columns bronze has, but the key) differ from
   the previous event's closes the open version at s and opens one at s, and one with equal
   tracked values changes the open version in place. A delete closes the open version at its s.
3. Version rows. `__start_at` = s of the opening event, `__end_at` = s of the event that closed
   it (NULL: the current version), `_source_commit_version` = v of the opening event, data
   values = those of its last non-delete event (after rule 4). Retired columns (silver columns
   bronze no longer has) are NULL on the current version; closed versions hold what their last
   event held.
4. `ignore_null_updates`. Before anything is compared, an event's NULL in a value column (not
   the key, not a retired column) takes the last non-NULL value of that column among the key's
   earlier non-delete events since its last insert or delete (an insert's own NULLs stand; a
   delete's values are never carried). Events keep their raw values: the fill is recomputed
   over the whole ordered list every time.
5. Rebuild at V (the initial load, or after a lost window). Each key of the conformed snapshot
   is an event (s = its `seq`, v = V, update) unless the key already has a non-delete event
   with the same s and the same raw values (on the snapshot's data columns); a key whose
   history ends present (its last event is not a delete) and that the snapshot lacks gets a
   delete (s = its last event's s, v = V). Changes inside a lost window are never seen.
6. Late changes. The history is the fold of all events, so a change with an older s arriving
   in a later commit lands where s belongs (closed versions split or rewritten), whatever the
   split of commits into runs.

Silver after a run = every key's folded versions (`HistoryOracle.expected`), compared exactly
(`cdf_platform_testkit.faults.modeling.sequenced_history_problems`).

Example:
    >>> oracle = HistoryOracle(config)  # doctest: +SKIP
    >>> oracle.rebuild(snapshot, 0, ["id", "name", "amount", "seq"])  # doctest: +SKIP
    >>> oracle.incremental(bronze.versions, 0, 4)  # doctest: +SKIP
    >>> oracle.expected(["id", "name", "amount", "seq"], retired=set())  # doctest: +SKIP
    [{'id': 1, 'name': 'ada', ..., '__start_at': 0, '__end_at': None, ...}]
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cdf_platform_testkit.faults.bronze_model import KEY, SEQUENCE_COLUMN, Row, VersionRecord
from cdf_platform_testkit.faults.change_oracle import conform_row
from cdf_platform_testkit.faults.options import HistoryConfig
from cdf_platform_testkit.faults.oracle import SOURCE_VERSION, normalize_value

START_AT = "__start_at"
END_AT = "__end_at"
KINDS = ("insert", "update", "delete")


@dataclass(frozen=True)
class Event:
    """One change of a key (rule 1): sequence value, bronze commit version, kind and conformed
    values (normalized, the key included; a column the row did not have is NULL)."""

    seq: Any
    version: int
    kind: str
    values: Mapping[str, Any]
    generation: int = 0

    @property
    def order(self) -> tuple[Any, int, int]:
        """Where the event stands in its key's history: (s, generation, v); the source
        generation goes up with each rebuild that does not move the watermark forward (a
        recreated bronze numbers its commits from 0 again)."""
        return (self.seq, self.generation, self.version)


@dataclass(frozen=True)
class Version:
    """One version of a key (rule 3); `end_at` None: the current one."""

    start_at: Any
    end_at: Any
    source_version: int
    values: dict[str, Any]

    def row(self) -> Row:
        """The silver row: data values and the three history columns."""
        return {
            **self.values,
            START_AT: self.start_at,
            END_AT: self.end_at,
            SOURCE_VERSION: self.source_version,
        }


def ordered(events: Iterable[Event]) -> list[Event]:
    """`events` in (s, v) order (a stable sort: exact ties keep the order they were seen in)."""
    return sorted(events, key=lambda e: e.order)


def filled(events: Sequence[Event], columns: Collection[str]) -> list[dict[str, Any]]:
    """Rule 4: each ordered event's values, its NULLs in `columns` replaced by the last non-NULL
    value of its key's earlier non-delete events since the last insert or delete."""
    out: list[dict[str, Any]] = []
    held: dict[str, Any] = {}
    for event in events:
        values = dict(event.values)
        if event.kind != "update":
            held = {}  # an insert starts afresh; a delete's values are never carried
        if event.kind != "delete":
            for column in columns:
                if values.get(column) is None:
                    values[column] = held.get(column)
                else:
                    held[column] = values[column]
        out.append(values)
    return out


def fold(
    events: Iterable[Event],
    columns: Sequence[str],
    retired: Collection[str] = (),
    *,
    tracked: Collection[str] | None = None,
    ignore_nulls: bool = False,
) -> list[Version]:
    """Rules 2 to 4: one key's versions from all its events, on silver's data columns
    `columns` (`retired` among them: bronze no longer has them); `tracked`: the value columns
    whose change opens a version (None: every value column, as the generated pipelines)."""
    value_columns = [c for c in columns if c != KEY and c not in retired]
    tracked = value_columns if tracked is None else [c for c in value_columns if c in tracked]
    events = ordered(events)
    projected = [{c: e.values.get(c) for c in columns} for e in events]
    if ignore_nulls:
        projected = [{c: v.get(c) for c in columns} for v in filled(events, value_columns)]
    versions: list[Version] = []
    opening: Event | None = None
    last: dict[str, Any] = {}
    for event, values in zip(events, projected, strict=True):
        if opening is not None and (
            event.kind == "delete" or any(values[c] != last[c] for c in tracked)
        ):
            versions.append(Version(opening.seq, event.seq, opening.version, last))
            opening = None
        if event.kind == "delete":
            continue
        opening = opening or event
        last = values
    if opening is not None:
        current = {c: None if c in retired else v for c, v in last.items()}
        versions.append(Version(opening.seq, None, opening.version, current))
    return versions


class HistoryOracle:
    """Every key's events seen by the pipeline so far, and the SCD2 silver they fold into.

    Example:
        >>> oracle = HistoryOracle(config)  # doctest: +SKIP
        >>> oracle.add(1, Event(1000, 1, "insert", {"id": 1, "name": "ada", "seq": 1000}))
        ... # doctest: +SKIP
    """

    def __init__(self, config: HistoryConfig) -> None:
        self.config = config
        self.ignore_nulls = config.on("ignore_nulls")
        self.events: dict[Any, list[Event]] = {}
        self.generation = 0

    def add(self, key: Any, event: Event) -> None:
        """Record one event of `key`."""
        assert event.kind in KINDS, event.kind
        self.events.setdefault(key, []).append(event)

    def event(self, raw: Row, version: int, kind: str) -> Event:
        """Rule 1: the event a bronze row (`kind` change in commit `version`) makes."""
        row, kept = conform_row(self.config, raw)
        values = {c: normalize_value(v) for c, v in row.items()}
        kind = kind if kept else "delete"
        return Event(values.get(SEQUENCE_COLUMN), version, kind, values, self.generation)

    def incremental(self, versions: Mapping[int, VersionRecord], watermark: int, end: int) -> None:
        """Add the events of bronze commits (watermark, end]."""
        for version in range(watermark + 1, end + 1):
            for key, (kind, raw) in sorted(versions[version].changes.items()):
                self.add(key, self.event(raw, version, kind))

    def rebuild(self, snapshot: Iterable[Row], version: int, columns: Sequence[str]) -> None:
        """Rule 5: add the events a rebuild at `version` from the bronze `snapshot` (raw rows,
        conformed here; `columns`: its data columns after conforming) makes."""
        present: dict[Any, Event] = {}
        for raw in snapshot:
            event = self.event(raw, version, "update")
            if event.kind != "delete":
                present[event.values[KEY]] = event
        for key, event in present.items():
            if not any(self._same(seen, event, columns) for seen in self.events.get(key, [])):
                self.add(key, event)
        for key, events in self.events.items():
            last = ordered(events)[-1] if events else None
            if key not in present and last is not None and last.kind != "delete":
                deleted = Event(last.seq, version, "delete", dict(last.values), self.generation)
                self.add(key, deleted)

    @staticmethod
    def _same(seen: Event, event: Event, columns: Sequence[str]) -> bool:
        if seen.kind == "delete" or seen.seq != event.seq:
            return False
        return all(seen.values.get(c) == event.values.get(c) for c in columns)

    def versions(self, key: Any, columns: Sequence[str], retired: Collection[str]) -> list[Version]:
        """`key`'s versions on silver's data columns `columns` (`retired` among them)."""
        events = self.events.get(key, [])
        return fold(events, columns, retired, ignore_nulls=self.ignore_nulls)

    def expected(self, columns: Sequence[str], retired: Collection[str]) -> list[Row]:
        """Every silver row the oracle expects, keys in order, each key's versions by start."""
        return [
            version.row()
            for key in sorted(self.events)
            for version in self.versions(key, columns, retired)
        ]
