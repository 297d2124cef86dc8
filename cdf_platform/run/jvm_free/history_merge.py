"""The SCD2 merge of the JVM-free path (`cdf_platform.run.jvm_free.incremental_run`): the
staged history of a small change set and its MERGE by `deltalake`, as
`cdf_platform.spark.write.history` stages and merges it.

The rules are that module's (docs/design.md, section 5): a key's changes are replayed in commit
order against silver's open version of the key; a change opens a version when it follows a
delete, or when its tracked values differ from the version before it (silver's open version for
the range's first change); a delete closes the open version. Each version takes the values of
its last change, `__start_at` the timestamp of the commit that opened it, `__end_at` that of the
change that closed it (NULL while open), `_source_commit_version` the version that opened it.
Silver's open version of a key is closed at the range's first change that opens a version or
deletes the key; a change of untracked columns before that updates it in place.

Values compare as Spark compares them (NULL equals NULL, NaN equals NaN, -0.0 equals 0.0);
only flat types this module compares exactly are taken (`comparable_schema`).

Commit timestamps are Spark's, not `deltalake`'s: Spark's change feed dates a commit by its
commit file's modification time, raised to 1 ms after the previous commit's where it is not
later, from 100 commits before the read's first (Delta's `CDCReader.getTimestampsByVersion`),
while `deltalake` reads the commit's `commitInfo.timestamp`. A table with in-commit
timestamps goes to Spark.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cdf_platform.core.silver_columns import END_AT, SOURCE_VERSION, START_AT
from cdf_platform.planning.run_result import RowCounts
from cdf_platform.run.jvm_free.latest_merge import (
    SilverTable,
    commit_winners,
    ident,
    merge_into,
    row_counts,
)

if TYPE_CHECKING:
    import pyarrow as pa

    from cdf_platform.core.spec.pipeline_spec import PipelineSpec
    from cdf_platform.deltalog.log import DeltaLog
    from cdf_platform.planning.plan import RunPlan
    from cdf_platform.spark.write.merge import TxnStamp

# Delta's DeltaHistoryManager.POTENTIALLY_UNMONOTONIZED_TIMESTAMPS: how many commits before a
# change-feed read's first one its timestamps are monotonized from.
UNMONOTONIZED_COMMITS = 100
IN_COMMIT_TIMESTAMPS = "delta.enableInCommitTimestamps"
ACTION = "__cdf_platform_action"  # `current`: silver's open version; `insert`: a new version
CONTINUED = "__cdf_platform_continued"  # the open version continues (updated in place)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def spark_commit_timestamps(log: DeltaLog, start: int, end: int) -> dict[int, datetime] | None:
    """The `_commit_timestamp` Spark's change feed gives versions `start`..`end` of the table
    `log` lists (module doc); None when one of them has no commit file."""
    stamps: dict[int, datetime] = {}
    previous: int | None = None
    first = max(start - UNMONOTONIZED_COMMITS, 0)
    for version in log.commit_versions():
        if version < first:
            continue
        if version > end:
            break
        modified = log.commit_file_mtime_ms(version)
        assert modified is not None  # listed
        if previous is not None and modified <= previous:
            modified = previous + 1
        previous = modified
        if version >= start:
            stamps[version] = _EPOCH + timedelta(milliseconds=modified)
    return stamps if len(stamps) == end - start + 1 else None


def comparable_schema(schema: pa.Schema) -> bool:
    """Whether every column of `schema` is of a flat type this module compares as Spark does
    (numbers, strings, binary, booleans, dates, timestamps)."""
    import pyarrow as pa

    checks = (
        pa.types.is_integer,
        pa.types.is_floating,
        pa.types.is_decimal,
        pa.types.is_string,
        pa.types.is_large_string,
        pa.types.is_binary,
        pa.types.is_large_binary,
        pa.types.is_boolean,
        pa.types.is_date,
        pa.types.is_timestamp,
    )
    return all(any(check(field.type) for check in checks) for field in schema)


def _comparable(value: Any) -> Any:
    """`value` as Spark's equality sees it: every NaN one value (-0.0 already equals 0.0)."""
    if isinstance(value, float) and math.isnan(value):
        return ("NaN",)
    return value


def _signature(values: Sequence[Any], positions: Sequence[int]) -> tuple[Any, ...]:
    return tuple(_comparable(values[i]) for i in positions)


@dataclass(frozen=True)
class Change:
    """A key's change in one commit: its version, whether it deletes the key, its values."""

    version: int
    gone: bool
    values: tuple[Any, ...]


@dataclass
class _Segment:
    start_version: int
    start_at: datetime
    opened_by_delete: bool
    last: tuple[Any, ...]


@dataclass(frozen=True)
class StagedHistory:
    """The staged source of the MERGE: versions to insert (value columns' values, version,
    start, end) and silver's open versions to close or update in place (values, end,
    continued), both by key."""

    inserts: list[tuple[tuple[Any, ...], tuple[Any, ...], int, datetime, datetime | None]]
    currents: list[tuple[tuple[Any, ...], tuple[Any, ...], datetime | None, bool]]


def stage_key(
    changes: Sequence[Change],
    open_values: tuple[Any, ...] | None,
    tracked: Sequence[int],
    stamps: dict[int, datetime],
) -> tuple[list[_Segment], _Segment | None]:
    """One key's changes (in commit order) cut into segments: each begins with a change that
    opens a version or deletes the key; segment 0 (the changes before the first such) continues
    silver's open version (`open_values`, None without one). Returns the segments after
    segment 0, and segment 0 (or None)."""
    segments: list[_Segment] = []
    continued: _Segment | None = None
    previous: Change | None = None
    for change in changes:
        if previous is None:
            differs = open_values is None or _signature(change.values, tracked) != _signature(
                open_values, tracked
            )
        else:
            differs = previous.gone or _signature(change.values, tracked) != _signature(
                previous.values, tracked
            )
        if change.gone or differs:
            segments.append(
                _Segment(change.version, stamps[change.version], change.gone, change.values)
            )
        elif segments:
            segments[-1].last = change.values
        elif continued is None:
            continued = _Segment(change.version, stamps[change.version], False, change.values)
        else:
            continued.last = change.values
        previous = change
    return segments, continued


def staged_history(
    changes_by_key: dict[tuple[Any, ...], list[Change]],
    open_versions: dict[tuple[Any, ...], tuple[Any, ...]],
    tracked: Sequence[int],
    stamps: dict[int, datetime],
) -> StagedHistory:
    """The staged source of an incremental SCD2 MERGE (module doc) from each key's changes in
    commit order and silver's open versions (value columns' values, by key)."""
    inserts: list[tuple[tuple[Any, ...], tuple[Any, ...], int, datetime, datetime | None]] = []
    currents: list[tuple[tuple[Any, ...], tuple[Any, ...], datetime | None, bool]] = []
    for key, changes in changes_by_key.items():
        current = open_versions.get(key)
        segments, continued = stage_key(changes, current, tracked, stamps)
        for index, segment in enumerate(segments):
            end = segments[index + 1].start_at if index + 1 < len(segments) else None
            if not segment.opened_by_delete:
                inserts.append((key, segment.last, segment.start_version, segment.start_at, end))
        if current is None:
            continue
        if continued is not None:
            end = segments[0].start_at if segments else None
            unchanged = _signature(continued.last, range(len(current))) == _signature(
                current, range(len(current))
            )
            if end is not None or not unchanged:
                currents.append((key, continued.last, end, True))
        else:
            currents.append((key, current, segments[0].start_at, False))
    return StagedHistory(inserts, currents)


def staged_table(
    staged: StagedHistory, keys: Sequence[str], values: Sequence[str], silver: pa.Schema
) -> pa.Table:
    """`staged` as the MERGE's source: silver's data columns (silver's types), version, start,
    end, ACTION and CONTINUED."""
    import pyarrow as pa

    columns = [*keys, *values, SOURCE_VERSION, START_AT, END_AT]
    rows = [
        {
            **dict(zip(keys, key, strict=True)),
            **dict(zip(values, value, strict=True)),
            SOURCE_VERSION: version,
            START_AT: start,
            END_AT: end,
            ACTION: "insert",
            CONTINUED: False,
        }
        for key, value, version, start, end in staged.inserts
    ] + [
        {
            **dict(zip(keys, key, strict=True)),
            **dict(zip(values, value, strict=True)),
            SOURCE_VERSION: None,
            START_AT: None,
            END_AT: end,
            ACTION: "current",
            CONTINUED: continued,
        }
        for key, value, end, continued in staged.currents
    ]
    schema = pa.schema(
        [
            *(silver.field(c).with_nullable(True) for c in columns),
            pa.field(ACTION, pa.string()),
            pa.field(CONTINUED, pa.bool_()),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def history_stamps(plan: RunPlan, silver: SilverTable) -> dict[int, datetime] | None:
    """SCD2: the commit timestamps of the plan's range as Spark's change feed gives them
    (`spark_commit_timestamps`), or None when this path does not take the run: a silver
    column of a type it does not compare as Spark does, bronze with in-commit timestamps, or a
    commit file of the range gone. Decided before the change feed is read."""
    assert plan.start_version is not None
    log = plan.window.log
    metadata = log.metadata_at(plan.end_version)
    if metadata is None or metadata.configuration.get(IN_COMMIT_TIMESTAMPS, "").lower() == "true":
        return None
    if not comparable_schema(silver.schema):
        return None
    return spark_commit_timestamps(log, plan.start_version, plan.end_version)


def history_source(
    spec: PipelineSpec,
    silver: SilverTable,
    rows: pa.Table,
    kept: Sequence[str],
    stamps: dict[int, datetime],
) -> pa.Table:
    """SCD2: the staged source of the MERGE (`staged_history`, `staged_table`) from the change
    rows `rows`, dated by `stamps` (`history_stamps`).

    Raises:
        DataQualityError: a null key, or two surviving rows of one key in one commit.
    """
    values = [c for c in kept if c not in spec.keys]
    winners = commit_winners(rows, spec.keys, pipeline_id=spec.id, table=spec.source)
    columns = [rows.column(c).to_pylist() for c in values]
    by_key: dict[tuple[Any, ...], list[Change]] = {}
    for (key, version), (gone, index) in sorted(winners.items(), key=lambda item: item[0][1]):
        by_key.setdefault(key, []).append(
            Change(version, gone, tuple(column[index] for column in columns))
        )
    tracked = [values.index(c) for c in spec.tracked_columns(values)]
    open_versions = _open_versions(silver, spec.keys, values, by_key)
    staged = staged_history(by_key, open_versions, tracked, stamps)
    return staged_table(staged, spec.keys, values, silver.schema)


def _open_versions(
    silver: SilverTable,
    keys: Sequence[str],
    values: Sequence[str],
    touched: Container[tuple[Any, ...]],
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Silver's open versions (`__end_at` NULL) of the `touched` keys: key -> values (read by
    DataFusion: `to_pyarrow_dataset` refuses a table with the deletion-vector feature on)."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    selected = ", ".join(ident(c) for c in [*keys, *values])
    reader = (
        QueryBuilder()
        .register("silver", silver.table)
        .execute(f"SELECT {selected} FROM silver WHERE {ident(END_AT)} IS NULL")
    )
    wanted = pa.schema([silver.schema.field(c) for c in [*keys, *values]])
    open_rows = pa.table(reader.read_all()).cast(wanted)
    key_columns = [open_rows.column(k).to_pylist() for k in keys]
    value_columns = [open_rows.column(c).to_pylist() for c in values]
    found = {}
    for index, key in enumerate(zip(*key_columns, strict=True)):
        if key in touched:
            found[key] = tuple(column[index] for column in value_columns)
    return found


def merge_history(
    silver: SilverTable, source: pa.Table, keys: Sequence[str], stamp: TxnStamp
) -> RowCounts:
    """MERGE a staged SCD2 source (`history_source`) into silver in one commit carrying
    `stamp`; the rows it inserted and updated (versions opened, closed or updated in place)."""
    if not source.num_rows:  # no version opened, closed or changed: the caller advances
        return RowCounts(0, 0, 0)
    values = [c for c in silver.schema.names if c not in {*keys, SOURCE_VERSION, START_AT, END_AT}]
    # As `cdf_platform.spark.write.history.merge_history_sql`: a `current` row meets silver's
    # open version of its key, to close it or (continued) update it in place; an `insert` row
    # adds a version.
    on = " AND ".join(
        [
            f"s.{ident(ACTION)} = 'current'",
            f"t.{ident(END_AT)} IS NULL",
            *(f"t.{ident(k)} = s.{ident(k)}" for k in keys),
        ]
    )
    continued = f"s.{ident(CONTINUED)}"
    update = {ident(END_AT): f"s.{ident(END_AT)}"} | {
        ident(c): f"CASE WHEN {continued} THEN s.{ident(c)} ELSE t.{ident(c)} END" for c in values
    }
    inserted = [*keys, *values, SOURCE_VERSION, START_AT, END_AT]
    return row_counts(
        merge_into(silver, source, on, stamp)
        .when_matched_update(update)
        .when_not_matched_insert(
            {ident(c): f"s.{ident(c)}" for c in inserted},
            predicate=f"s.{ident(ACTION)} = 'insert'",
        )
        .execute()
    )
