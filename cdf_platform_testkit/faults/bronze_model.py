"""A bronze Delta table written with delta-rs (JVM-free, ~100x faster than Spark commits), and a
Python model of its contents at every version.

The model is what the generator draws keys from; the oracle reads bronze snapshots through
delta-rs and checks them against the model, so the harness itself is checked on every run.

Example:
    >>> bronze = BronzeTable.create("/tmp/lake/bronze", [{"id": 1, "name": "a", "amount": 1}])
    ... # doctest: +SKIP
    >>> bronze.update([1], amount_delta=5); bronze.version  # doctest: +SKIP
    1
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]  # (no stubs; deltalake brings it)
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.schema import PrimitiveType

Row = dict[str, Any]
# What one commit did to a key, as its change feed says it: ("insert" | "update" | "delete",
# the row after the commit, or before it for a delete).
Change = tuple[str, Row]

KEY = "id"
BASE_COLUMNS = ("id", "name", "amount")
EXTRA_COLUMN = "note"
RENAMED_COLUMN = "remark"
SEQUENCE_COLUMN = "seq"
# Written in histories that edit `keys` to [id, tenant] (`cdf_platform_testkit.faults.spec_edits`):
# a function of the key, so never NULL and never changed while the key is not.
TENANT = "tenant"
NESTED_COLUMNS = ("tags", "attrs")
CDF = "delta.enableChangeDataFeed"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
LONG_RETENTION = "interval 7 days"
_TYPES: dict[str, pa.DataType] = {
    "id": pa.int64(),
    "name": pa.string(),
    "amount": pa.int64(),
    EXTRA_COLUMN: pa.string(),
    RENAMED_COLUMN: pa.string(),
    SEQUENCE_COLUMN: pa.int64(),
    TENANT: pa.int64(),
    "tags": pa.list_(pa.string()),
    "attrs": pa.map_(pa.string(), pa.string()),
}


def arrow_table(columns: Sequence[str], rows: Iterable[Row]) -> pa.Table:
    """An Arrow table of `rows` (missing values are nulls) with the bronze column types (a MAP
    value is a list of (key, value) pairs, in the order written)."""
    materialized = list(rows)
    return pa.table({c: pa.array([r.get(c) for r in materialized], _TYPES[c]) for c in columns})


def tenant_of(key: int) -> int:
    """The `tenant` of the row whose key is `key`."""
    return key % 3


def sql_in(keys: Iterable[int]) -> str:
    """`id IN (...)` for integer keys (never empty: callers pass at least one key)."""
    return f"{KEY} IN ({', '.join(str(int(k)) for k in sorted(keys))})"


@dataclass(frozen=True)
class VersionRecord:
    """What the harness knows about one bronze version right after writing it, and what the
    commit did to each key it touched (`changes`, what its change feed holds per key)."""

    columns: tuple[str, ...]
    rows: dict[int, Row]
    cdf_enabled: bool
    operation: str
    changes: dict[int, Change] = field(default_factory=dict)


@dataclass
class BronzeTable:
    """The bronze table at `path` and its model: current rows by key, and a record per version.

    Every write goes through a method here, which updates the model and records each new
    version (a write that changes nothing creates no version in delta-rs, and VACUUM creates
    two).
    """

    path: str
    columns: list[str]
    rows: dict[int, Row]
    versions: dict[int, VersionRecord] = field(default_factory=dict)
    cdf_enabled: bool = True
    recreations: int = 0

    @classmethod
    def create(
        cls, path: str, rows: Sequence[Row], columns: Sequence[str] = BASE_COLUMNS
    ) -> BronzeTable:
        """A new CDF-enabled table at `path` holding `rows` (version 0)."""
        write_deltalake(path, arrow_table(columns, rows), configuration={CDF: "true"})
        table = cls(path, list(columns), {r[KEY]: dict(r) for r in rows})
        table._record("CREATE", {}, table.rows)
        return table

    # -- reading -----------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """The latest version, from the log (delta-rs)."""
        return int(DeltaTable(self.path).version())

    @property
    def table_id(self) -> str:
        """The Delta table id (changes when the table is recreated)."""
        return str(DeltaTable(self.path).metadata().id)

    def keys(self) -> list[int]:
        """Keys present now, sorted."""
        return sorted(self.rows)

    def gone_keys(self) -> list[int]:
        """Keys some earlier version held that the table does not hold now: those whose last
        row had a value in the extra column first, then by key."""
        last: dict[int, Row] = {}
        for version in sorted(self.versions):
            last.update(self.versions[version].rows)
        gone = [k for k in last if k not in self.rows]
        return sorted(gone, key=lambda k: (last[k].get(EXTRA_COLUMN) is None, k))

    def _record(
        self, operation: str, before: dict[int, Row] | None = None, touched: Iterable[int] = ()
    ) -> None:
        """Record the versions the last write made; `before` (the rows before it) and
        `touched` (the keys it wrote) give the changes of a data write (`_changes`)."""
        latest = self.version
        known = max(self.versions, default=-1)
        changes = {} if before is None else self._changes(operation, before, set(touched))
        for version in range(known + 1, latest + 1):
            last = version == latest
            self.versions[version] = VersionRecord(
                tuple(self.columns),
                copy.deepcopy(self.rows),
                self.cdf_enabled,
                operation,
                copy.deepcopy(changes) if last else {},
            )

    def _changes(
        self, operation: str, before: dict[int, Row], touched: set[int]
    ) -> dict[int, Change]:
        """Per key, what the change feed of a data write holds after its collapse inside the
        commit: an UPDATE's rows and a MERGE's matched rows are postimages (updates); an overwrite,
        `replaceWhere` or append writes inserts (a rewritten key's delete and insert in one
        commit: the insert stands); a key gone from the table is a delete of its last row."""
        changes: dict[int, Change] = {}
        for key, row in self.rows.items():
            if key in touched:
                # An UPDATE writes postimages only (a changed key's new value too).
                updated = operation == "UPDATE" or (operation == "MERGE" and key in before)
                kind = "update" if updated else "insert"
                changes[key] = (kind, dict(row))
        for key, row in before.items():
            if key not in self.rows:
                changes[key] = ("delete", dict(row))
        return changes

    def _full(self, row: Row) -> Row:
        return {c: row.get(c) for c in self.columns}

    # -- data operations -----------------------------------------------------------------------

    def insert(self, rows: Sequence[Row]) -> None:
        """Append `rows` (keys must be new)."""
        before = copy.deepcopy(self.rows)
        full = [self._full(r) for r in rows]
        write_deltalake(self.path, arrow_table(self.columns, full), mode="append")
        self.rows.update({r[KEY]: r for r in full})
        self._record("INSERT", before, (r[KEY] for r in full))

    def update(
        self,
        keys: Sequence[int],
        *,
        amount_delta: int | None,
        name: str | None,
        seq: dict[int, int] | None = None,
    ) -> None:
        """`UPDATE SET amount = amount + delta (NULL when delta is None), name = ... [, seq = ...]
        WHERE id IN keys`, one commit per distinct new sequence value (one without)."""
        groups: dict[int | None, list[int]] = {}
        for key in keys:
            groups.setdefault(None if seq is None else seq[key], []).append(key)
        for value, group in groups.items():
            self._update_group(group, amount_delta=amount_delta, name=name, seq=value)

    def _update_group(
        self, keys: Sequence[int], *, amount_delta: int | None, name: str | None, seq: int | None
    ) -> None:
        before = copy.deepcopy(self.rows)
        updates = {"amount": "NULL" if amount_delta is None else f"amount + {int(amount_delta)}"}
        updates["name"] = "NULL" if name is None else f"'{name}'"
        if seq is not None:
            updates[SEQUENCE_COLUMN] = str(int(seq))
        DeltaTable(self.path).update(updates=updates, predicate=sql_in(keys))
        for key in keys:
            if key in self.rows:
                row = self.rows[key]
                row["amount"] = (
                    None
                    if row["amount"] is None or amount_delta is None
                    else row["amount"] + amount_delta
                )
                row["name"] = name
                if seq is not None:
                    row[SEQUENCE_COLUMN] = seq
        self._record("UPDATE", before, keys)

    def update_key(self, old: int, new: int) -> None:
        """`UPDATE SET id = new WHERE id = old` (and `tenant` with it, when bronze has it): the
        change feed holds a preimage of `old` and a postimage of `new`, and no delete."""
        before = copy.deepcopy(self.rows)
        updates = {KEY: str(int(new))}
        if TENANT in self.columns:
            updates[TENANT] = str(tenant_of(new))
        DeltaTable(self.path).update(updates=updates, predicate=sql_in([old]))
        row = self.rows.pop(old)
        row[KEY] = new
        if TENANT in self.columns:
            row[TENANT] = tenant_of(new)
        self.rows[new] = row
        self._record("UPDATE", before, [new])

    def delete(self, keys: Sequence[int]) -> None:
        """`DELETE WHERE id IN keys` (keys may be absent: then no version is written)."""
        before = copy.deepcopy(self.rows)
        DeltaTable(self.path).delete(sql_in(keys))
        for key in keys:
            self.rows.pop(key, None)
        self._record("DELETE", before)

    def merge(self, upserts: Sequence[Row], deletes: Sequence[int]) -> None:
        """One MERGE: upsert `upserts`; delete the matched keys in `deletes` (a source row with
        amount -1 marks a delete)."""
        before = copy.deepcopy(self.rows)
        source = [self._full(r) for r in upserts]
        source += [{**{c: None for c in self.columns}, KEY: k, "amount": -1} for k in deletes]
        (
            DeltaTable(self.path)
            .merge(
                arrow_table(self.columns, source),
                predicate="t.id = s.id",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_delete(predicate="s.amount = -1")
            .when_matched_update_all()
            .when_not_matched_insert_all(predicate="s.amount != -1 OR s.amount IS NULL")
            .execute()
        )
        for key in deletes:
            self.rows.pop(key, None)
        written = [r for r in source if r[KEY] not in deletes]
        self.rows.update({r[KEY]: r for r in written})
        self._record("MERGE", before, (r[KEY] for r in written))

    def overwrite(self, rows: Sequence[Row]) -> None:
        """Replace the whole table with `rows` (same schema)."""
        before = copy.deepcopy(self.rows)
        full = [self._full(r) for r in rows]
        write_deltalake(self.path, arrow_table(self.columns, full), mode="overwrite")
        self.rows = {r[KEY]: r for r in full}
        self._record("OVERWRITE", before, self.rows)

    def replace_where(self, min_key: int, rows: Sequence[Row]) -> None:
        """`replaceWhere id >= min_key` with `rows` (all of them satisfy the predicate)."""
        before = copy.deepcopy(self.rows)
        full = [self._full(r) for r in rows]
        assert all(r[KEY] >= min_key for r in full)
        write_deltalake(
            self.path,
            arrow_table(self.columns, full),
            mode="overwrite",
            predicate=f"{KEY} >= {int(min_key)}",
        )
        self.rows = {k: r for k, r in self.rows.items() if k < min_key}
        self.rows.update({r[KEY]: r for r in full})
        self._record("REPLACE_WHERE", before, (r[KEY] for r in full))

    # -- schema --------------------------------------------------------------------------------

    def add_column(self, rows: Sequence[Row] | None = None) -> None:
        """Add the nullable `note` column: with ALTER TABLE alone, or with an append of `rows`
        under schema merge (one commit either way)."""
        assert EXTRA_COLUMN not in self.columns
        before = copy.deepcopy(self.rows)
        self.columns.append(EXTRA_COLUMN)
        for row in self.rows.values():
            row[EXTRA_COLUMN] = None
        if rows is None:
            field_ = Field(EXTRA_COLUMN, PrimitiveType("string"), nullable=True)
            DeltaTable(self.path).alter.add_columns(field_)
            self._record("ADD_COLUMN")
            return
        full = [self._full(r) for r in rows]
        write_deltalake(
            self.path, arrow_table(self.columns, full), mode="append", schema_mode="merge"
        )
        self.rows.update({r[KEY]: r for r in full})
        self._record("ADD_COLUMN", before, (r[KEY] for r in full))

    def overwrite_dropping_column(self, rows: Sequence[Row], *, rename: bool = False) -> None:
        """Overwrite with a schema that no longer has `note` (a non-additive change); with
        `rename`, `note` comes back as `remark` holding the same values."""
        assert EXTRA_COLUMN in self.columns
        before = copy.deepcopy(self.rows)
        index = self.columns.index(EXTRA_COLUMN)
        if rename:
            self.columns[index] = RENAMED_COLUMN
            rows = [{**r, RENAMED_COLUMN: r.get(EXTRA_COLUMN)} for r in rows]
        else:
            self.columns.remove(EXTRA_COLUMN)
        full = [self._full(r) for r in rows]
        write_deltalake(
            self.path, arrow_table(self.columns, full), mode="overwrite", schema_mode="overwrite"
        )
        self.rows = {r[KEY]: r for r in full}
        self._record("OVERWRITE_SCHEMA", before, self.rows)

    # -- table maintenance --------------------------------------------------------------------

    def optimize(self) -> None:
        """Compact small files (dataChange=false: no change data)."""
        DeltaTable(self.path).optimize.compact()
        self._record("OPTIMIZE")

    def checkpoint(self) -> None:
        """Write a checkpoint at the latest version (no new version)."""
        DeltaTable(self.path).create_checkpoint()

    def set_properties(self, properties: dict[str, str]) -> None:
        """One SET TBLPROPERTIES commit."""
        DeltaTable(self.path).alter.set_table_properties(properties)
        if CDF in properties:
            self.cdf_enabled = properties[CDF] == "true"
        self._record("SET TBLPROPERTIES")

    def vacuum_now(self, *, full: bool) -> list[str]:
        """VACUUM with zero retention: every tombstoned data file goes; with `full`, every file
        the log does not reference, `_change_data` included."""
        removed = DeltaTable(self.path).vacuum(
            retention_hours=0, enforce_retention_duration=False, dry_run=False, full=full
        )
        self._record("VACUUM")
        return list(removed)

    def vacuum_after_aging(self, *, full: bool, clean_log: bool, age_seconds: float) -> list[str]:
        """Shorten `deletedFileRetentionDuration` (and `logRetentionDuration` when `clean_log`)
        to one second, let everything age past it, VACUUM by the table's own retention, clean
        the log behind a fresh checkpoint, then restore long retentions."""
        short = {DELETED_FILE_RETENTION: "interval 1 seconds"}
        if clean_log:
            short[LOG_RETENTION] = "interval 1 seconds"
        self.set_properties(short)
        if clean_log:
            self.checkpoint()
        time.sleep(age_seconds)
        removed = DeltaTable(self.path).vacuum(dry_run=False, full=full)
        self._record("VACUUM")
        if clean_log:
            DeltaTable(self.path).cleanup_metadata()
        self.set_properties({k: LONG_RETENTION for k in short})
        return list(removed)

    def cdf_gap(self, keys: Sequence[int], *, amount_delta: int) -> None:
        """Turn the change feed off, update `keys` while it is off, turn it back on."""
        self.set_properties({CDF: "false"})
        self.update(keys, amount_delta=amount_delta, name="no-cdf")
        self.set_properties({CDF: "true"})

    def recreate(self, rows: Sequence[Row], *, keep_extra_column: bool) -> None:
        """Drop the table (its folder) and create a new one at the same path: new table id,
        versions from 0 again."""
        shutil.rmtree(self.path)
        os.makedirs(self.path)
        extra = (EXTRA_COLUMN, RENAMED_COLUMN)
        columns = [c for c in self.columns if keep_extra_column or c not in extra]
        self.columns = columns
        full: list[Row] = [{c: r.get(c) for c in columns} for r in rows]
        write_deltalake(self.path, arrow_table(columns, full), configuration={CDF: "true"})
        self.rows = {r[KEY]: r for r in full}
        self.versions = {}
        self.cdf_enabled = True
        self.recreations += 1
        self._record("RECREATE", {}, self.rows)
