"""The snapshot oracle: what silver must hold after a consumer run, and whether the run's replay
window was really lost (ground truth, from the files on disk and the harness's own record).

Expected silver, after a run that leaves watermark W (bronze snapshot S = bronze at W, read with
delta-rs, never with the Spark engine under test):
- hard delete: silver's data rows are exactly S's rows (silver columns bronze does not have at W,
  such as a dropped column, are NULL).
- soft delete: the live rows (`_is_deleted = false`) are exactly S's rows; the deleted rows are
  exactly the keys silver held before the run (live or deleted) that S lacks, with the values
  silver last held for them (a delete never rewrites values), except the retired columns (silver
  columns S does not have), which are NULL on every row. A key inserted and deleted between
  two runs never appears. `_deleted_at` is NULL on live rows and, on a row deleted by this run,
  the time of a bronze commit made after the previous run was planned.
- `_source_commit_version`: a row this run changed carries a version of the run's range
  ((W_before, W] for an incremental run, exactly W for a rebuild); a row it did not change keeps
  its stamp (an incremental run may also re-stamp a row a commit in the range rewrote with equal
  values; a rebuild after a source reset re-stamps rows stamped above W).

Ground truth of a lost window for a run from watermark W to latest L (docs/design.md section 4,
checked independently of the engine's replay-window code): the table was recreated (new table id),
or a commit file of W+1..L is missing or the snapshot at W+1 cannot be built, or a file that a
commit of W+1..L needs is gone (its `cdc` files, else its `add`/`remove` files with dataChange), or
W+1 < L and timestamp(W+1) is older than `delta.deletedFileRetentionDuration` (Delta always lets a
read start at the latest version), or the change feed was off at a version in W+1..L, or a column
was dropped in W+1..L.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from deltalake import DeltaTable, QueryBuilder

from cdf_platform_testkit.faults.bronze_model import (
    DELETED_FILE_RETENTION,
    KEY,
    BronzeTable,
    Row,
)

if TYPE_CHECKING:
    from arro3.core import Table

SOURCE_VERSION = "_source_commit_version"
IS_DELETED = "_is_deleted"
DELETED_AT = "_deleted_at"
PLATFORM_COLUMNS = (SOURCE_VERSION, IS_DELETED, DELETED_AT)
DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600.0
# Commit timestamps (file mtime vs commitInfo) and the clock of the run differ by milliseconds.
CLOCK_SLACK = timedelta(seconds=2)
_INTERVAL = re.compile(r"^\s*interval\s+(\d+)\s+(second|minute|hour|day|week)s?\s*$", re.I)
_UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}


def normalize_value(value: Any) -> Any:
    """A value in the form the oracle compares: a MAP (a list of (key, value) pairs, as
    written and as delta-rs reads it back) as its entries sorted, an ARRAY as a tuple."""
    if isinstance(value, list | tuple):
        items = [normalize_value(v) for v in value]
        if any(isinstance(v, tuple) for v in value):
            return tuple(sorted(items, key=repr))
        return tuple(items)
    return value


def read_table(path: str, version: int | None = None) -> Table:
    """The Delta table at `path` (at `version`) read with delta-rs's `QueryBuilder`, which
    applies deletion vectors, as Arrow (`pyarrow.table()` takes it as it is)."""
    table = DeltaTable(path) if version is None else DeltaTable(path, version=version)
    return QueryBuilder().register("t", table).execute("SELECT * FROM t").read_all()


def read_rows(path: str, version: int | None = None) -> tuple[list[str], list[Row]]:
    """Columns and rows of the Delta table at `path` (at `version`), read with delta-rs
    (`read_table`), values normalized (`normalize_value`)."""
    result = read_table(path, version)
    names = list(result.column_names)
    columns = [[normalize_value(v) for v in column.to_pylist()] for column in result.columns]
    return names, [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


@dataclass(frozen=True)
class SilverRow:
    """One silver row: data values, the bronze version that wrote it, and soft-delete state."""

    values: dict[str, Any]
    stamp: int | None
    deleted: bool
    deleted_at: datetime | None


@dataclass(frozen=True)
class Silver:
    """Silver as read back: data columns and rows by key (duplicates reported separately)."""

    columns: tuple[str, ...]
    rows: dict[int, SilverRow]
    duplicate_keys: tuple[int, ...]


def read_silver(target: str) -> Silver:
    """Silver at `target` read with delta-rs (an empty Silver when it does not exist)."""
    if not DeltaTable.is_deltatable(target):
        return Silver((), {}, ())
    names, rows = read_rows(target)
    data = tuple(c for c in names if c not in PLATFORM_COLUMNS)
    by_key: dict[int, SilverRow] = {}
    duplicates = []
    for row in rows:
        key = row[KEY]
        if key in by_key:
            duplicates.append(key)
        by_key[key] = SilverRow(
            values={c: row[c] for c in data},
            stamp=row.get(SOURCE_VERSION),
            deleted=bool(row.get(IS_DELETED, False)),
            deleted_at=row.get(DELETED_AT),
        )
    return Silver(data, by_key, tuple(duplicates))


@dataclass(frozen=True)
class ExpectedRow:
    """What the oracle requires of one silver row."""

    values: dict[str, Any]
    deleted: bool


def expected_silver(
    previous: dict[int, ExpectedRow],
    snapshot: list[Row],
    columns: list[str],
    bronze_columns: list[str],
    *,
    soft: bool,
) -> dict[int, ExpectedRow]:
    """Expected silver rows after a run to watermark W (see the module docstring).

    Args:
        previous: the expected rows after the previous successful run (empty before the first).
        snapshot: bronze rows at W.
        columns: silver's data columns after the run.
        bronze_columns: bronze's columns at W (silver's other columns are retired: NULL).
        soft: soft delete mode.
    """
    expected = {row[KEY]: ExpectedRow({c: row.get(c) for c in columns}, False) for row in snapshot}
    if soft:
        for key, row in previous.items():
            if key not in expected:
                values = {c: row.values.get(c) if c in bronze_columns else None for c in columns}
                expected[key] = ExpectedRow(values, True)
    return expected


@dataclass(frozen=True)
class RunWindow:
    """The facts a run's stamp and `_deleted_at` checks need."""

    mode: str  # "incremental", "rebuild", "initial_load" or "noop"
    watermark_before: int | None
    watermark_after: int
    source_reset: bool
    earliest_commit_time: datetime
    checked_at: datetime


def silver_problems(
    silver: Silver,
    expected: dict[int, ExpectedRow],
    columns: list[str],
    previous: Silver,
    run: RunWindow,
) -> list[str]:
    """Every way `silver` differs from the oracle (empty when it matches)."""
    problems = []
    if silver.duplicate_keys:
        problems.append(f"silver holds keys {sorted(silver.duplicate_keys)} twice")
    if sorted(silver.columns) != sorted(columns):
        problems.append(f"silver columns {list(silver.columns)} != expected {columns}")
    missing = sorted(set(expected) - set(silver.rows))
    extra = sorted(set(silver.rows) - set(expected))
    if missing:
        problems.append(f"silver lacks keys {missing}: {[expected[k] for k in missing[:3]]}")
    if extra:
        problems.append(
            f"silver has unexpected keys {extra}: {[silver.rows[k] for k in extra[:3]]}"
        )
    for key in sorted(set(expected) & set(silver.rows)):
        want, got = expected[key], silver.rows[key]
        got_values = {c: got.values.get(c) for c in columns}
        if got_values != want.values or got.deleted != want.deleted:
            problems.append(
                f"key {key}: silver {got_values} deleted={got.deleted}, "
                f"oracle {want.values} deleted={want.deleted}"
            )
            continue
        problems += _stamp_problems(key, got, previous.rows.get(key), run)
    return problems


def _stamp_problems(
    key: int, got: SilverRow, before: SilverRow | None, run: RunWindow
) -> list[str]:
    problems = []
    low, high = run.watermark_before, run.watermark_after
    changed = before is None or before.deleted != got.deleted or _differ(before.values, got.values)
    stamp = got.stamp
    if stamp is None:
        return [f"key {key}: _source_commit_version is NULL"]
    if run.mode == "noop":
        ok = before is not None and before == got
    elif run.mode == "incremental":
        in_range = low is not None and low < stamp <= high
        ok = in_range or (not changed and before is not None and stamp == before.stamp)
    else:
        kept = before is not None and stamp == before.stamp
        # A rebuild after a source reset re-stamps rows stamped above the new watermark.
        restamp = changed or (
            run.source_reset and before is not None and (before.stamp or 0) > high
        )
        ok = stamp == high if restamp else kept
    if not ok:
        problems.append(
            f"key {key}: _source_commit_version {stamp} (before: "
            f"{before.stamp if before else None}) does not fit a {run.mode} run ({low}, {high}]"
        )
    problems += _deleted_at_problems(key, got, before, run)
    return problems


def _differ(before: dict[str, Any], after: dict[str, Any]) -> bool:
    # A column added since `before` was read holds NULL on the rows that existed then.
    return any(before.get(c) != after.get(c) for c in set(before) | set(after))


def _deleted_at_problems(
    key: int, got: SilverRow, before: SilverRow | None, run: RunWindow
) -> list[str]:
    if not got.deleted:
        return [] if got.deleted_at is None else [f"key {key}: live row has _deleted_at"]
    if got.deleted_at is None:
        return [f"key {key}: deleted row has no _deleted_at"]
    at = got.deleted_at
    if at.tzinfo is not None:
        at = at.astimezone(UTC).replace(tzinfo=None)
    fresh = run.earliest_commit_time - CLOCK_SLACK <= at <= run.checked_at + CLOCK_SLACK
    kept = before is not None and before.deleted and before.deleted_at == got.deleted_at
    if kept or (fresh and run.mode != "noop"):
        return []
    return [f"key {key}: _deleted_at {at} is neither kept nor a commit time of this run"]


# -- ground truth of lost windows -------------------------------------------------------------


@dataclass(frozen=True)
class LostWindow:
    """Why the range after a watermark cannot be replayed, per the ground truth."""

    reason: str  # "reset", "log", "files", "time", "cdf" or "schema"
    version: int | None
    detail: str


def _commit_path(table: str, version: int) -> str:
    return os.path.join(table, "_delta_log", f"{version:020d}.json")


def _commit_actions(table: str, version: int) -> list[dict[str, Any]]:
    with open(_commit_path(table, version), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def needed_files(table: str, version: int) -> list[str]:
    """Files a change-feed read of `version` needs: its cdc files if it has any, else the
    add/remove files with dataChange=true."""
    actions = _commit_actions(table, version)
    cdc = [a["cdc"]["path"] for a in actions if "cdc" in a]
    if cdc:
        paths = cdc
    else:
        paths = [
            a[kind]["path"]
            for a in actions
            for kind in ("add", "remove")
            if kind in a and a[kind].get("dataChange", True)
        ]
    return [os.path.join(table, unquote(p)) for p in paths]


def _snapshot_buildable(table: str, version: int) -> bool:
    log_dir = os.path.join(table, "_delta_log")
    names = os.listdir(log_dir)
    checkpoints = sorted(int(n.split(".")[0]) for n in names if n.endswith(".checkpoint.parquet"))
    bases = [c for c in checkpoints if c <= version] + [-1]
    base = max(bases)
    return all(os.path.exists(_commit_path(table, v)) for v in range(base + 1, version + 1))


def commit_times(table: str, version: int) -> tuple[float, float]:
    """(commitInfo timestamp, commit file mtime) of `version`, in epoch seconds."""
    actions = _commit_actions(table, version)
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    mtime = os.stat(_commit_path(table, version)).st_mtime
    return float(info.get("timestamp", mtime * 1000)) / 1000.0, mtime


def retention_seconds(table: str) -> float:
    """The table's `delta.deletedFileRetentionDuration` in seconds (7 days when unset)."""
    value = DeltaTable(table).metadata().configuration.get(DELETED_FILE_RETENTION)
    if not value:
        return DEFAULT_RETENTION_SECONDS
    match = _INTERVAL.match(value)
    assert match, f"unparsed retention {value!r}"
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2).lower()]


def lost_window(
    bronze: BronzeTable,
    watermark: int,
    latest: int,
    *,
    table_id_at_watermark: str,
    now: float | None = None,
) -> LostWindow | None:
    """Whether the range (watermark, latest] of `bronze` is lost, per the ground truth."""
    path = bronze.path
    if bronze.table_id != table_id_at_watermark:
        return LostWindow("reset", None, "the table was recreated")
    if latest <= watermark:
        return None
    start = watermark + 1
    for version in range(start, latest + 1):
        if not os.path.exists(_commit_path(path, version)):
            return LostWindow("log", version, "commit file removed")
    if not _snapshot_buildable(path, start):
        return LostWindow("log", start, "no checkpoint and commits to build the start snapshot")
    for version in range(start, latest + 1):
        gone = [f for f in needed_files(path, version) if not os.path.exists(f)]
        if gone:
            return LostWindow("files", version, f"{len(gone)} needed files vacuumed")
    now = time.time() if now is None else now
    limit = now - retention_seconds(path)
    # Delta refuses time travel to a version older than the retention, except to the latest
    # one (SnapshotManagement.enforceTimeTravelWithinDeletedFileRetentionDuration).
    if start < latest:
        if max(commit_times(path, start)) < limit:
            return LostWindow("time", start, "older than deletedFileRetentionDuration")
        assert min(commit_times(path, start)) > limit + 0.3, "time-travel limit too close to call"
    for version in range(start, latest + 1):
        if not bronze.versions[version].cdf_enabled:
            return LostWindow("cdf", version, "change feed off at this version")
    for version in range(start, latest + 1):
        before, after = bronze.versions[version - 1].columns, bronze.versions[version].columns
        if not set(before) <= set(after):
            return LostWindow("schema", version, f"columns {before} -> {after}")
    return None
