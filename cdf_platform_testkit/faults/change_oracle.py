"""The change oracle: what an SCD1 silver must hold after each consumer run, computed in plain
Python from what every bronze commit did to each key (the harness's record,
`VersionRecord.changes`) and the pipeline's options, never from the platform's SQL.

Rules (docs/design.md section 5, docs/pipeline-spec.md):
- A change is the row a commit left for a key (insert, update) or the row it removed (delete);
  the pipeline's transform and derived columns apply to it, and a row `where` does not keep is
  a delete of its key. The spec is the one the run uses: after a spec edit
  (`cdf_platform_testkit.faults.spec_edits`) the edited `where` and `columns`.
- An incremental run over (W, L] takes, per key, its changes in order (the `sequence_by` value,
  then the commit version) and keeps the last; with `ignore_null_updates`, each value column
  takes the last non-NULL value since the key's last insert or delete in the range (`reset`:
  there was one). It applies over silver's row only when newer (by sequence value, then
  version); a delete removes the row (hard) or tombstones it (soft: values kept); an upsert over
  a live row keeps silver's value where the change holds NULL (`ignore_null_updates`, no reset),
  and over a tombstone or no row at all it writes the change's values as they are.
- A rebuild at V compares silver with the snapshot at V: a live row keeps its value where the
  snapshot holds NULL (`ignore_null_updates`); a row with a later sequence value than the
  snapshot's is kept (unless stamped past V); keys gone from the snapshot are removed or
  tombstoned. Retired columns (silver columns bronze no longer has, or a derived column an
  edit removed) are NULL on every row a run writes, and a rebuild writes every row still
  holding one.
- A rebuild after an edit of `keys` rewrites silver in the new shape (`reshape`): its rows are
  exactly the conformed snapshot's, stamped V, on the snapshot's columns (no tombstones, no
  retired columns, no value kept by `ignore_null_updates` or a later sequence value).

Example:
    >>> oracle = ChangeOracle(config, soft=True)  # doctest: +SKIP
    >>> oracle.incremental(bronze.versions, 4, 9, columns)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from cdf_platform_testkit.faults.bronze_model import KEY, SEQUENCE_COLUMN, Row, VersionRecord
from cdf_platform_testkit.faults.options import HistoryConfig
from cdf_platform_testkit.faults.oracle import ExpectedRow, normalize_value

TRANSFORM_COLUMN = "band"


def conform_row(config: HistoryConfig, row: Row) -> tuple[Row, bool]:
    """`row` after the pipeline's transform and derived columns, and whether `where` keeps it
    (the Python twins of `cdf_platform_testkit.transforms:conform_people` and of the
    expressions in `cdf_platform_testkit.faults.spec_edits`)."""
    out = dict(row)
    amount = out.get("amount")
    if config.on("transform"):
        name = out.get("name")
        out["name"] = None if name is None else name.capitalize()
        out[TRANSFORM_COLUMN] = "high" if amount is not None and amount >= 20 else "low"
    return config.spec_shape().conform(out)


def conformed_columns(config: HistoryConfig, columns: list[str]) -> list[str]:
    """Silver's data columns for bronze `columns` under `config`."""
    extra = [TRANSFORM_COLUMN] if config.on("transform") else []
    extra += config.spec_shape().derived_columns
    return [*columns, *(c for c in extra if c not in columns)]


@dataclass(frozen=True)
class OracleRow:
    """One expected silver row: data values (normalized), tombstone flag, and the bronze version
    and sequence value that order later changes against it."""

    values: dict[str, Any]
    deleted: bool
    version: int

    @property
    def seq(self) -> Any:
        return self.values.get(SEQUENCE_COLUMN)


@dataclass(frozen=True)
class _Change:
    version: int
    kind: str  # insert | update | delete
    values: dict[str, Any]

    def order(self, sequenced: bool) -> tuple[Any, ...]:
        return (self.values.get(SEQUENCE_COLUMN), self.version) if sequenced else (self.version,)


class ChangeOracle:
    """The expected SCD1 silver of one pipeline, advanced run by run."""

    def __init__(self, config: HistoryConfig, *, soft: bool) -> None:
        self.config = config
        self.soft = soft
        self.sequenced = config.on("sequence_by")
        self.ignore_nulls = config.on("ignore_nulls")
        self.rows: dict[int, OracleRow] = {}

    def expected(self) -> dict[int, ExpectedRow]:
        """The rows in the form `oracle.silver_problems` checks."""
        return {k: ExpectedRow(dict(r.values), r.deleted) for k, r in self.rows.items()}

    # -- helpers -------------------------------------------------------------------------------

    def _values(self, row: Row, columns: list[str]) -> dict[str, Any]:
        return {c: normalize_value(row.get(c)) for c in columns}

    def _newer(self, change: _Change, row: OracleRow) -> bool:
        if not self.sequenced:
            return change.version > row.version
        seq, current = change.values.get(SEQUENCE_COLUMN), row.seq
        if current is None or seq > current:
            return True
        return bool(seq == current and change.version > row.version)

    def _retire(self, values: dict[str, Any], retired: set[str]) -> dict[str, Any]:
        return {c: None if c in retired else v for c, v in values.items()}

    def _upsert(
        self,
        row: OracleRow | None,
        values: dict[str, Any],
        version: int,
        *,
        restart: bool,
        retired: set[str],
    ) -> OracleRow:
        """The row an upsert of `values` over `row` (None: no row) writes."""
        if row is not None and self.ignore_nulls and not (restart or row.deleted):
            values = {
                c: row.values.get(c) if v is None and c != KEY else v for c, v in values.items()
            }
        return OracleRow(self._retire(values, retired), False, version)

    # -- runs ----------------------------------------------------------------------------------

    def incremental(
        self,
        versions: dict[int, VersionRecord],
        watermark: int,
        end: int,
        columns: list[str],
        retired: set[str],
    ) -> None:
        """Apply the changes of bronze versions (watermark, end]; `columns`: silver's data
        columns after the run (`retired` among them)."""
        by_key: dict[int, list[_Change]] = {}
        for version in range(watermark + 1, end + 1):
            for key, (kind, raw) in versions[version].changes.items():
                row, kept = conform_row(self.config, raw)
                if kind != "delete" and not kept:
                    kind = "delete"
                change = _Change(version, kind, self._values(row, columns))
                by_key.setdefault(key, []).append(change)
        for key, changes in by_key.items():
            self._apply(key, sorted(changes, key=lambda c: c.order(self.sequenced)), retired)
        self._widen(columns)

    def _apply(self, key: int, changes: list[_Change], retired: set[str]) -> None:
        latest = changes[-1]
        values = dict(latest.values)
        reset = False
        if self.ignore_nulls:
            restarts = [i for i, c in enumerate(changes) if c.kind in ("insert", "delete")]
            reset = bool(restarts)
            segment = changes[restarts[-1] :] if restarts else changes
            live = [c for c in segment if c.kind != "delete"]
            for column in values:
                found = [c.values[column] for c in live if c.values[column] is not None]
                values[column] = found[-1] if found else None
        current = self.rows.get(key)
        if current is not None and not self._newer(latest, current):
            return
        if latest.kind == "delete":
            if current is None:
                return
            if self.soft:
                values_kept = self._retire(current.values, retired)
                self.rows[key] = OracleRow(values_kept, True, latest.version)
            else:
                del self.rows[key]
            return
        self.rows[key] = self._upsert(
            current, values, latest.version, restart=reset, retired=retired
        )

    def rebuild(
        self, snapshot: list[Row], version: int, columns: list[str], retired: set[str]
    ) -> None:
        """Reconcile with the bronze snapshot at `version` (raw rows, conformed here)."""
        wanted: dict[int, dict[str, Any]] = {}
        for raw in snapshot:
            row, kept = conform_row(self.config, raw)
            if kept:
                wanted[row[KEY]] = self._values(row, columns)
        rows: dict[int, OracleRow] = {}
        for key, values in wanted.items():
            current = self.rows.get(key)
            if current is None:
                rows[key] = OracleRow(self._retire(values, retired), False, version)
                continue
            current = replace(current, values={c: current.values.get(c) for c in columns})
            written = self._upsert(current, values, version, restart=False, retired=retired)
            differs = (
                current.deleted
                or written.values != current.values
                or current.version > version
                or any(current.values.get(c) is not None for c in retired)
            )
            if self.sequenced:
                later = current.seq is not None and values.get(SEQUENCE_COLUMN) is not None
                later = later and current.seq > values[SEQUENCE_COLUMN]
                differs = differs and (not later or current.version > version)
            rows[key] = written if differs else current
        if self.soft:
            for key, current in self.rows.items():
                if key in wanted:
                    continue
                values = {c: current.values.get(c) for c in columns}
                held = any(values.get(c) is not None for c in retired)
                stale = not current.deleted or current.version > version or held
                rows[key] = (
                    OracleRow(self._retire(values, retired), True, version)
                    if stale
                    else replace(current, values=values)
                )
        self.rows = rows

    def reshape(self, snapshot: list[Row], version: int, columns: list[str]) -> None:
        """Silver rewritten in a new shape from the bronze snapshot at `version` (raw rows,
        conformed here; `columns`: the conformed snapshot's): exactly its rows, live."""
        rows: dict[int, OracleRow] = {}
        for raw in snapshot:
            row, kept = conform_row(self.config, raw)
            if kept:
                rows[row[KEY]] = OracleRow(self._values(row, columns), False, version)
        self.rows = rows

    def _widen(self, columns: list[str]) -> None:
        """Every row holds every silver column (a column added since holds NULL)."""
        for key, row in self.rows.items():
            self.rows[key] = replace(row, values={c: row.values.get(c) for c in columns})
