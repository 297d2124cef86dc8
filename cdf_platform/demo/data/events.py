"""A deterministic demo change-event log: Debezium-shaped events (`before`/`after` row images,
`op`, `ts_ms`) appended to a CDF-enabled bronze table, one commit per batch, and their fold (what
a `changes: events` silver must hold).

A batch is what a Debezium landing job appends: the first one a snapshot (`r` for every row);
later ones inserts (`c`), updates (`u`, `before` the old image) and deletes (`d`, the row in
`before`), several events of one key in one batch (strictly increasing `ts_ms`, in shuffled row
order), and a few late events: an update whose `ts_ms` is lower than that key's latest event
written by the previous batch, one of them, when the previous batch deleted a key, for such a
key. No two events of one key ever share a `ts_ms` (the platform refuses two different events
of one key with one sequence value). Batch b's events are dated from the source clock's hour b
(`ts_ms` multiples of `STEP_MS` from its start); a late one lies inside the previous batch's hour
and is never such a multiple. Written by `deltalake`, without a JVM; the same seed and history
always give the same rows.

Example:
    >>> write_event_batch("/lake/bronze/accounts_cdc", batch_size=100)  # doctest: +SKIP
    EventBatch(table='accounts_cdc', batch_index=0, version=1, created=100, updated=0, ...)
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.arrow_rows import arrow_table
from cdf_platform.deltalog.delta_tables import (
    create_delta_table,
    open_delta_table,
    write_delta_table,
)
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.demo.data.source import DEMO_EPOCH

ACCOUNTS_CDC = "accounts_cdc"
# event-log table -> the key of its row image.
EVENT_KEYS = {ACCOUNTS_CDC: "account_id"}
# The row image's columns (the `before`/`after` struct) -> Delta type.
IMAGE_SCHEMA = {
    "account_id": "long",
    "owner": "string",
    "balance": "decimal(12,2)",
    "status": "string",
}
ACCOUNT_STATUSES = ("active", "dormant", "frozen", "overdrawn")
DELETES = frozenset({"d"})
EPOCH_MS = int(DEMO_EPOCH.timestamp() * 1000)
BATCH_SPAN_MS = 3_600_000  # an hour of the source's clock per batch
STEP_MS = 10  # a batch's events are STEP_MS apart; a late event is never a multiple of it
MAX_BATCH_SIZE = 100_000  # keeps a batch's events (at most ~1.3 x batch_size) inside its hour


@dataclass(frozen=True)
class ChangeEvent:
    """One bronze row: a source change as Debezium writes it."""

    op: str
    ts_ms: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def image(self) -> dict[str, Any]:
        """The row image, `coalesce(after, before)` (a delete carries its row in `before`)."""
        image = self.after if self.after is not None else self.before
        assert image is not None, "an event has a row image"
        return image

    @property
    def key(self) -> int:
        """The event's account id."""
        return int(self.image[EVENT_KEYS[ACCOUNTS_CDC]])


@dataclass(frozen=True)
class EventBatch:
    """What one event batch appended: its events by kind, the late ones, and the keys with
    several events in it."""

    table: str
    batch_index: int
    version: int
    created: int
    updated: int
    deleted: int
    late: int
    keys_with_several_events: int

    def metadata(self) -> dict[str, int]:
        """The figures a bronze materialization records."""
        return {
            "version": self.version,
            "events_created": self.created,
            "events_updated": self.updated,
            "events_deleted": self.deleted,
            "events_late": self.late,
            "keys_with_several_events": self.keys_with_several_events,
        }


def read_events(
    path: str, *, version: int | None = None, storage: StorageConfig = ENVIRONMENT_ONLY
) -> list[ChangeEvent]:
    """Every event of the event log at `path` (at `version`), read by deltalake, no JVM, with
    the lake's object-store options `storage`."""
    from deltalake import QueryBuilder

    table = open_delta_table(path, storage, version=version)
    query = 'SELECT "before", "after", "op", "ts_ms" FROM t'
    result = QueryBuilder().register("t", table).execute(query).read_all()
    columns = [column.to_pylist() for column in result.columns]
    return [
        ChangeEvent(op=op, ts_ms=int(ts_ms), before=before, after=after)
        for before, after, op, ts_ms in zip(*columns, strict=True)
    ]


def fold_events(events: list[ChangeEvent]) -> dict[int, ChangeEvent]:
    """Each key's latest event: the one with the highest `ts_ms` (this log never holds two of
    one key with the same value)."""
    latest: dict[int, ChangeEvent] = {}
    for event in events:
        found = latest.get(event.key)
        if found is None or event.ts_ms > found.ts_ms:
            latest[event.key] = event
    return latest


def folded_rows(
    path: str,
    columns: list[str],
    *,
    version: int | None = None,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> Counter[tuple[Any, ...]]:
    """The rows a hard-deleting SCD1 silver of the log at `path` (at `version`) holds, as a
    multiset of `columns` (the image's fields and `ts_ms`): per key the latest event's image,
    unless that event is a delete."""
    rows: Counter[tuple[Any, ...]] = Counter()
    for event in fold_events(read_events(path, version=version, storage=storage)).values():
        if event.op not in DELETES:
            values = {**event.image, "ts_ms": event.ts_ms}
            rows[tuple(values[column] for column in columns)] += 1
    return rows


def _bronze_schema() -> Any:
    from deltalake.schema import Field, PrimitiveType, Schema, StructType

    image = StructType([Field(name, PrimitiveType(kind)) for name, kind in IMAGE_SCHEMA.items()])
    return Schema(
        [
            Field("before", image),
            Field("after", image),
            Field("op", PrimitiveType("string")),
            Field("ts_ms", PrimitiveType("long")),
        ]
    )


def _arrow(events: list[ChangeEvent]) -> Any:
    """`events` as an Arrow table of the bronze schema (a missing image is a NULL struct)."""
    from arro3.core import Array, DataType, Table, struct_array

    def images(side: str) -> Any:
        found = [getattr(event, side) for event in events]
        flat = arrow_table(IMAGE_SCHEMA, [image or {} for image in found])
        return struct_array(
            [flat.column(name).combine_chunks() for name in IMAGE_SCHEMA],
            fields=[flat.schema.field(name) for name in IMAGE_SCHEMA],
            mask=Array([image is None for image in found], DataType.bool()),
        )

    return Table.from_pydict(
        {
            "before": images("before"),
            "after": images("after"),
            "op": Array([event.op for event in events], DataType.string()),
            "ts_ms": Array([event.ts_ms for event in events], DataType.int64()),
        }
    )


def _balance(rng: random.Random) -> Decimal:
    return Decimal(f"{rng.randrange(-5_000, 1_000_000) / 100:.2f}")


def _new_image(key: int, rng: random.Random) -> dict[str, Any]:
    return {
        "account_id": key,
        "owner": f"owner-{rng.randrange(1, 500)}",
        "balance": _balance(rng),
        "status": rng.choice(ACCOUNT_STATUSES),
    }


def _changed_image(image: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """An update: a new balance, and now and then a new status."""
    status = rng.choice(ACCOUNT_STATUSES) if rng.random() < 0.3 else image["status"]
    return {**image, "balance": _balance(rng), "status": status}


class _BatchPlan:
    """The events of one batch, built key by key, then dated in a shuffled order."""

    def __init__(self, rng: random.Random, latest: dict[int, ChangeEvent]) -> None:
        self.rng = rng
        self.current = {k: e.image for k, e in latest.items() if e.op not in DELETES}
        self.ops: dict[int, list[str]] = {}

    def add(self, key: int, *ops: str) -> None:
        self.ops[key] = list(ops)

    def events(self, base_ms: int) -> list[ChangeEvent]:
        """The planned events, a key's in its order, keys interleaved; the i-th event of the
        batch at `base_ms + STEP_MS * i`."""
        turns = [key for key, ops in self.ops.items() for _ in ops]
        self.rng.shuffle(turns)
        pending = {key: iter(ops) for key, ops in self.ops.items()}
        events = []
        for index, key in enumerate(turns, start=1):
            op = next(pending[key])
            before = self.current.get(key)
            if op in DELETES:
                after = None
                del self.current[key]
            else:
                after = (
                    _new_image(key, self.rng)
                    if before is None
                    else _changed_image(before, self.rng)
                )
                self.current[key] = after
            # `before`: the old image of an update or delete; NULL for c and r (a new key).
            events.append(ChangeEvent(op, base_ms + STEP_MS * index, before, after))
        return events


def _late_events(
    rng: random.Random, latest: dict[int, ChangeEvent], previous_base_ms: int, count: int
) -> list[ChangeEvent]:
    """`count` late updates of keys whose latest event the previous batch wrote, each dated
    between the previous batch's start and that event; a key the previous batch deleted first
    (the tombstone case)."""
    previous = sorted(k for k, e in latest.items() if e.ts_ms >= previous_base_ms)
    deleted = [k for k in previous if latest[k].op in DELETES]
    chosen = [rng.choice(deleted)] if deleted and count else []
    others = [k for k in previous if k not in chosen]
    chosen += rng.sample(others, min(len(others), count - len(chosen)))
    late = []
    for key in chosen:
        ts_ms = rng.randrange(previous_base_ms + 1, latest[key].ts_ms)
        if ts_ms % STEP_MS == 0:  # never the time of an event of this batch's pattern
            ts_ms += 1
        late.append(ChangeEvent("u", ts_ms, None, _new_image(key, rng)))
    return late


def write_event_batch(
    path: str,
    *,
    batch_size: int = 1_000,
    seed: int = 7,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> EventBatch:
    """Append one deterministic batch of change events to the demo event log at `path` as a
    single commit (creating the table, CDF on, first), with the lake's object-store options
    `storage`.

    The first batch is a snapshot: `batch_size` `r` events. Each later batch updates ~60%,
    inserts ~30% and deletes ~10% of `batch_size` keys drawn from the live keys, gives about one
    key in six a second event in the batch (`c` then `u`, `u` then `u`, `u` then `d`), and
    adds `max(1, batch_size // 50)` late updates (module doc), with a RNG seeded by (seed,
    table, batch index).

    Raises:
        InvalidPipelineSpec: `batch_size` is < 1 or > `MAX_BATCH_SIZE`.
    """
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise InvalidPipelineSpec(f"batch_size must be in 1..{MAX_BATCH_SIZE}, got {batch_size}")
    if not is_delta_table(path, storage):
        configuration = {"delta.enableChangeDataFeed": "true"}
        create_delta_table(
            path, storage, _bronze_schema(), mode="ignore", configuration=configuration
        )
    written = read_events(path, storage=storage)
    latest = fold_events(written)
    # The batch index comes from the events (the latest one is in the previous batch's hour),
    # not from the table's version: property changes commit versions too.
    newest = max((e.ts_ms for e in written), default=None)
    batch_index = 0 if newest is None else (newest - EPOCH_MS) // BATCH_SPAN_MS + 1
    base_ms = EPOCH_MS + batch_index * BATCH_SPAN_MS
    rng = random.Random(f"{seed}:{ACCOUNTS_CDC}:{batch_index}")
    plan = _BatchPlan(rng, latest)
    live = sorted(plan.current)
    if not latest:
        for key in range(1, batch_size + 1):
            plan.add(key, "r")
        late: list[ChangeEvent] = []
    else:
        n_update = min(len(live), batch_size * 6 // 10)
        n_delete = min(len(live) - n_update, batch_size // 10)
        touched = rng.sample(live, n_update + n_delete)
        for index, key in enumerate(touched[:n_update]):
            plan.add(key, *(["u", "u"] if index % 6 == 0 else ["u"]))
        for index, key in enumerate(touched[n_update:]):
            plan.add(key, *(["u", "d"] if index % 3 == 0 else ["d"]))
        next_key = max(latest) + 1  # a deleted key never comes back
        for index in range(batch_size - n_update - n_delete):
            plan.add(next_key + index, *(["c", "u"] if index % 6 == 0 else ["c"]))
        late = _late_events(rng, latest, base_ms - BATCH_SPAN_MS, max(1, batch_size // 50))
    events = plan.events(base_ms) + late
    rng.shuffle(events)  # a landing job's row order is not the source's
    write_delta_table(path, storage, _arrow(events), mode="append")
    kinds = Counter(e.op for e in events)
    return EventBatch(
        table=ACCOUNTS_CDC,
        batch_index=batch_index,
        version=open_delta_table(path, storage).version(),
        created=kinds["c"] + kinds["r"],
        updated=kinds["u"] - len(late),
        deleted=kinds["d"],
        late=len(late),
        keys_with_several_events=sum(len(ops) > 1 for ops in plan.ops.values()),
    )
