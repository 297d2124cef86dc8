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

from arro3.core import Array, DataType, Table
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.schema import PrimitiveType

Row = dict[str, Any]

KEY = "id"
BASE_COLUMNS = ("id", "name", "amount")
EXTRA_COLUMN = "note"
CDF = "delta.enableChangeDataFeed"
DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
LONG_RETENTION = "interval 7 days"
_TYPES = {"id": DataType.int64, "name": DataType.string, "amount": DataType.int64}
_TYPES[EXTRA_COLUMN] = DataType.string


def arrow_table(columns: Sequence[str], rows: Iterable[Row]) -> Table:
    """An arro3 table of `rows` (missing values are nulls) with the bronze column types."""
    materialized = list(rows)
    return Table.from_pydict(
        {c: Array([r.get(c) for r in materialized], _TYPES[c]()) for c in columns}
    )


def sql_in(keys: Iterable[int]) -> str:
    """`id IN (...)` for integer keys (never empty: callers pass at least one key)."""
    return f"{KEY} IN ({', '.join(str(int(k)) for k in sorted(keys))})"


@dataclass(frozen=True)
class VersionRecord:
    """What the harness knows about one bronze version right after writing it."""

    columns: tuple[str, ...]
    rows: dict[int, Row]
    cdf_enabled: bool
    operation: str


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
        table._record("CREATE")
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

    def _record(self, operation: str) -> None:
        latest = self.version
        known = max(self.versions, default=-1)
        snapshot = VersionRecord(
            tuple(self.columns), copy.deepcopy(self.rows), self.cdf_enabled, operation
        )
        for version in range(known + 1, latest + 1):
            self.versions[version] = snapshot

    def _full(self, row: Row) -> Row:
        return {c: row.get(c) for c in self.columns}

    # -- data operations -----------------------------------------------------------------------

    def insert(self, rows: Sequence[Row]) -> None:
        """Append `rows` (keys must be new)."""
        full = [self._full(r) for r in rows]
        write_deltalake(self.path, arrow_table(self.columns, full), mode="append")
        self.rows.update({r[KEY]: r for r in full})
        self._record("INSERT")

    def update(self, keys: Sequence[int], *, amount_delta: int, name: str | None) -> None:
        """`UPDATE SET amount = amount + delta, name = ... WHERE id IN keys`."""
        updates = {"amount": f"amount + {int(amount_delta)}"}
        updates["name"] = "NULL" if name is None else f"'{name}'"
        DeltaTable(self.path).update(updates=updates, predicate=sql_in(keys))
        for key in keys:
            if key in self.rows:
                row = self.rows[key]
                row["amount"] = None if row["amount"] is None else row["amount"] + amount_delta
                row["name"] = name
        self._record("UPDATE")

    def delete(self, keys: Sequence[int]) -> None:
        """`DELETE WHERE id IN keys` (keys may be absent: then no version is written)."""
        DeltaTable(self.path).delete(sql_in(keys))
        for key in keys:
            self.rows.pop(key, None)
        self._record("DELETE")

    def merge(self, upserts: Sequence[Row], deletes: Sequence[int]) -> None:
        """One MERGE: upsert `upserts`; delete the matched keys in `deletes` (a source row with
        amount -1 marks a delete)."""
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
        self.rows.update({r[KEY]: r for r in source if r[KEY] not in deletes})
        self._record("MERGE")

    def overwrite(self, rows: Sequence[Row]) -> None:
        """Replace the whole table with `rows` (same schema)."""
        full = [self._full(r) for r in rows]
        write_deltalake(self.path, arrow_table(self.columns, full), mode="overwrite")
        self.rows = {r[KEY]: r for r in full}
        self._record("OVERWRITE")

    def replace_where(self, min_key: int, rows: Sequence[Row]) -> None:
        """`replaceWhere id >= min_key` with `rows` (all of them satisfy the predicate)."""
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
        self._record("REPLACE_WHERE")

    # -- schema --------------------------------------------------------------------------------

    def add_column(self, rows: Sequence[Row] | None = None) -> None:
        """Add the nullable `note` column: with ALTER TABLE alone, or with an append of `rows`
        under schema merge (one commit either way)."""
        assert EXTRA_COLUMN not in self.columns
        self.columns.append(EXTRA_COLUMN)
        for row in self.rows.values():
            row[EXTRA_COLUMN] = None
        if rows is None:
            field_ = Field(EXTRA_COLUMN, PrimitiveType("string"), nullable=True)
            DeltaTable(self.path).alter.add_columns(field_)
        else:
            full = [self._full(r) for r in rows]
            write_deltalake(
                self.path, arrow_table(self.columns, full), mode="append", schema_mode="merge"
            )
            self.rows.update({r[KEY]: r for r in full})
        self._record("ADD_COLUMN")

    def overwrite_dropping_column(self, rows: Sequence[Row]) -> None:
        """Overwrite with a schema that no longer has `note` (a non-additive change)."""
        assert EXTRA_COLUMN in self.columns
        self.columns.remove(EXTRA_COLUMN)
        full = [self._full(r) for r in rows]
        write_deltalake(
            self.path, arrow_table(self.columns, full), mode="overwrite", schema_mode="overwrite"
        )
        self.rows = {r[KEY]: r for r in full}
        self._record("OVERWRITE_SCHEMA")

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
        columns = [c for c in self.columns if keep_extra_column or c != EXTRA_COLUMN]
        self.columns = columns
        full: list[Row] = [{c: r.get(c) for c in columns} for r in rows]
        write_deltalake(self.path, arrow_table(columns, full), configuration={CDF: "true"})
        self.rows = {r[KEY]: r for r in full}
        self.versions = {}
        self.cdf_enabled = True
        self.recreations += 1
        self._record("RECREATE")
