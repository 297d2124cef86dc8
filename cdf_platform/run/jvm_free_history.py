"""SCD2 silver without Spark: the staged history of a small change set and its MERGE by
`deltalake`, as `cdf_platform.spark.write.history` stages and merges it.

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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cdf_platform.core.silver_columns import END_AT, SOURCE_VERSION, START_AT

if TYPE_CHECKING:
    import pyarrow as pa

    from cdf_platform.deltalog.log import DeltaLog

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
