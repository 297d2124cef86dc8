"""Which schema changes silver can follow, and which ones a change-feed replay can carry across.

Silver follows an additive change (a new column, a column made nullable) and a type widening
Delta itself allows (`TypeWidening.isTypeChangeSupported`, delta-spark 4.x): silver's column is
widened the same way. Every other change (a dropped, renamed or otherwise retyped column, a
column made NOT NULL, other partition columns) is non-additive.

A batch CDF read over a range that contains a non-additive schema change is refused by
delta-spark (CDCReader.checkBatchCdfReadSchemaIncompatibility,
DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE / ..._DATA_SCHEMA). It refuses a widening
too: the check (SchemaUtils.isReadCompatible) compares types for equality, and delta-spark 4.4
was measured to refuse a read of [s, L] whenever a widening lies in (s, L]; a read that starts
at the widening's own version succeeds. So a widening is not non-additive, but the replay
window still breaks at it (`SchemaComparison.blocks_replay`).

Columns are matched by their column-mapping physical name when the table has one
(`delta.columnMapping.physicalName`), else by name, the way
DeltaColumnMapping.hasNoColumnMappingSchemaChanges does: a field whose physical name survives
under another logical name was renamed; a physical name that disappears was dropped. Enabling
column mapping gives existing columns their own name as physical name, so it is not a change.

Example:
    >>> non_additive_changes(before, after)  # doctest: +SKIP
    ['column id renamed to ident', 'column s dropped']
    >>> [str(w) for w in compare_schemas(before, after).widenings]  # doctest: +SKIP
    ['column qty widened int -> bigint']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdf_platform.deltalog.actions import COLUMN_MAPPING_PHYSICAL_NAME, TableMetadata

# Integral types, narrowest first, as the log's schema JSON names them.
_INTEGRAL = ("byte", "short", "integer", "long")
# DecimalType.forType: the decimal an integral type fits in. Delta widens byte, short and int
# (all INT32 in Parquet) only to decimals at least as wide as int's (10, 0), long to (20, 0).
_INT32_AS_DECIMAL = (10, 0)
_INT64_AS_DECIMAL = (20, 0)
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
# Spark's SQL names of the atomic types whose JSON name differs.
_SQL_NAMES = {"byte": "tinyint", "short": "smallint", "integer": "int", "long": "bigint"}


def _decimal(data_type: str) -> tuple[int, int] | None:
    found = _DECIMAL.fullmatch(data_type)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _decimal_wider(wide: tuple[int, int], narrow: tuple[int, int]) -> bool:
    """DecimalType.isWiderThan: as many integer digits and as many fraction digits."""
    return wide[0] - wide[1] >= narrow[0] - narrow[1] and wide[1] >= narrow[1]


def is_widening(old: str, new: str) -> bool:
    """Whether Delta's type widening allows the atomic type change `old` -> `new` (schema JSON
    names: `integer`, `long`, `decimal(10,2)`, ...).

    The rules of delta-spark 4.x `TypeWidening.isTypeChangeSupported` (each also an up-cast):
    byte -> short -> int -> long; float -> double; date -> timestamp_ntz; byte, short or int ->
    double; decimal(p, s) -> decimal(p', s') with s' >= s and p' - s' >= p - s (a larger scale
    needs a precision at least as much larger); byte, short or int -> decimal(10, 0) or wider,
    long -> decimal(20, 0) or wider. delta-spark 4.4's ALTER COLUMN TYPE accepts each of them.
    """
    if old == new:
        return False
    if old in _INTEGRAL and new in _INTEGRAL:
        return _INTEGRAL.index(old) < _INTEGRAL.index(new)
    if (old, new) in (("float", "double"), ("date", "timestamp_ntz")):
        return True
    if old in _INTEGRAL[:3] and new == "double":
        return True
    target = _decimal(new)
    if target is None:
        return False
    if old in _INTEGRAL:
        return _decimal_wider(target, _INT64_AS_DECIMAL if old == "long" else _INT32_AS_DECIMAL)
    source = _decimal(old)
    return source is not None and _decimal_wider(target, source)


def sql_type(data_type: Any) -> str:
    """Spark's SQL name of a schema-JSON type (`integer` -> `int`); `struct`, `array` or `map`
    for a complex one."""
    if isinstance(data_type, Mapping):
        return str(data_type.get("type", "complex"))
    return _SQL_NAMES.get(str(data_type), str(data_type))


@dataclass(frozen=True)
class TypeWidening:
    """One column (or nested field) widened the way Delta's type widening allows.

    Attributes:
        path: the field's path: a top-level column, then struct field names, `element` (an
            array's), `key` / `value` (a map's), as ALTER TABLE ... ALTER COLUMN names it.
        old: the type before, as Spark's SQL names it (`int`).
        new: the type after (`bigint`).
    """

    path: tuple[str, ...]
    old: str
    new: str

    @property
    def name(self) -> str:
        """The dotted path (`qty`, `dims.width`)."""
        return ".".join(self.path)

    def __str__(self) -> str:
        return f"column {self.name} widened {self.old} -> {self.new}"


@dataclass(frozen=True)
class SchemaComparison:
    """What changed from one schema to another.

    Attributes:
        non_additive: a description of each change silver cannot follow.
        widenings: the type widenings (silver follows them by widening its own column).
    """

    non_additive: tuple[str, ...] = ()
    widenings: tuple[TypeWidening, ...] = ()

    @property
    def blocks_replay(self) -> str | None:
        """What stops a batch CDF read across this change (joined descriptions), or None.

        delta-spark 4.4 refuses to read across a widening as across any non-additive change
        (see the module docstring), though silver can follow it.
        """
        crossing = [f"{w} (a batch change feed read does not cross it)" for w in self.widenings]
        return "; ".join([*self.non_additive, *crossing]) or None


@dataclass
class _Found:
    non_additive: list[str] = field(default_factory=list)
    widenings: list[TypeWidening] = field(default_factory=list)

    def result(self) -> SchemaComparison:
        return SchemaComparison(tuple(self.non_additive), tuple(self.widenings))


def compare_schemas(old: TableMetadata, new: TableMetadata) -> SchemaComparison:
    """Every change from `old` to `new` that is non-additive or a type widening."""
    found = _Found()
    _compare_fields(_fields(old.schema), _fields(new.schema), (), found)
    old_partitioning = _physical_partitioning(old)
    new_partitioning = _physical_partitioning(new)
    if old_partitioning != new_partitioning:
        found.non_additive.append(
            f"partition columns changed from {list(old.partition_columns)} "
            f"to {list(new.partition_columns)}"
        )
    return found.result()


def non_additive_changes(old: TableMetadata, new: TableMetadata) -> list[str]:
    """Human descriptions of every non-additive change from `old` to `new` (empty if none).

    Non-additive: a dropped, renamed or retyped column (at any nesting depth) unless the type
    change is a widening Delta allows (`is_widening`), a column made NOT NULL, or different
    partition columns.
    """
    return list(compare_schemas(old, new).non_additive)


def compare_column_types(old: Any, new: Any, name: str) -> SchemaComparison:
    """How the data type of column `name` changed from `old` to `new` (schema-JSON types), for
    a table that must hold the new values: silver against the rows bronze now gives it.

    Types only: nullability is ignored (silver's columns are all nullable) and nested fields
    are matched by name. A nested field added or removed is non-additive here, since silver
    could not take it in place.
    """
    found = _Found()
    _compare_column_types(old, new, (name,), found)
    return found.result()


def _fields(struct: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(struct.get("fields") or [])


def _key(field: Mapping[str, Any]) -> str:
    metadata = field.get("metadata") or {}
    return str(metadata.get(COLUMN_MAPPING_PHYSICAL_NAME) or field["name"])


def _physical_partitioning(metadata: TableMetadata) -> tuple[str, ...]:
    by_name = {str(f["name"]).lower(): _key(f) for f in _fields(metadata.schema)}
    return tuple(by_name.get(name.lower(), name) for name in metadata.partition_columns)


def _compare_fields(
    old_fields: Iterable[Mapping[str, Any]],
    new_fields: Iterable[Mapping[str, Any]],
    prefix: tuple[str, ...],
    found: _Found,
) -> None:
    new_by_key = {_key(field): field for field in new_fields}
    for old_field in old_fields:
        path = (*prefix, str(old_field["name"]))
        name = ".".join(path)
        new_field = new_by_key.get(_key(old_field))
        if new_field is None:
            found.non_additive.append(f"column {name} dropped")
            continue
        if new_field["name"] != old_field["name"]:
            renamed = ".".join((*prefix, str(new_field["name"])))
            found.non_additive.append(f"column {name} renamed to {renamed}")
        if old_field.get("nullable", True) and not new_field.get("nullable", True):
            found.non_additive.append(f"column {name} made NOT NULL")
        _compare_types(old_field["type"], new_field["type"], path, found)


def _compare_types(old: Any, new: Any, path: tuple[str, ...], found: _Found) -> None:
    name = ".".join(path)
    if isinstance(old, Mapping) and isinstance(new, Mapping) and old["type"] == new["type"]:
        kind = old["type"]
        if kind == "struct":
            _compare_fields(_fields(old), _fields(new), path, found)
        elif kind == "array":
            if old.get("containsNull", True) and not new.get("containsNull", True):
                found.non_additive.append(f"array {name} made NOT NULL elements")
            _compare_types(old["elementType"], new["elementType"], (*path, "element"), found)
        elif kind == "map":
            if old.get("valueContainsNull", True) and not new.get("valueContainsNull", True):
                found.non_additive.append(f"map {name} made NOT NULL values")
            _compare_types(old["keyType"], new["keyType"], (*path, "key"), found)
            _compare_types(old["valueType"], new["valueType"], (*path, "value"), found)
        elif old != new:
            _atomic_change(old, new, path, found)
    elif old != new:
        _atomic_change(old, new, path, found)


def _atomic_change(old: Any, new: Any, path: tuple[str, ...], found: _Found) -> None:
    """Record `old` -> `new` at `path` as a widening when Delta allows it, else non-additive."""
    if isinstance(old, str) and isinstance(new, str) and is_widening(old, new):
        found.widenings.append(TypeWidening(path, sql_type(old), sql_type(new)))
    else:
        found.non_additive.append(
            f"column {'.'.join(path)} changed type from {sql_type(old)} to {sql_type(new)}"
        )


def _compare_column_types(old: Any, new: Any, path: tuple[str, ...], found: _Found) -> None:
    if not (isinstance(old, Mapping) and isinstance(new, Mapping) and old["type"] == new["type"]):
        if old != new:
            _atomic_change(old, new, path, found)
        return
    kind = old["type"]
    if kind == "struct":
        old_by_name = {str(f["name"]): f for f in _fields(old)}
        new_by_name = {str(f["name"]): f for f in _fields(new)}
        for name in sorted(old_by_name.keys() - new_by_name.keys()):
            found.non_additive.append(f"field {'.'.join((*path, name))} is gone")
        for name in sorted(new_by_name.keys() - old_by_name.keys()):
            found.non_additive.append(f"field {'.'.join((*path, name))} is new")
        for name, old_field in old_by_name.items():
            if name in new_by_name:
                new_type = new_by_name[name]["type"]
                _compare_column_types(old_field["type"], new_type, (*path, name), found)
    elif kind == "array":
        _compare_column_types(old["elementType"], new["elementType"], (*path, "element"), found)
    elif kind == "map":
        _compare_column_types(old["keyType"], new["keyType"], (*path, "key"), found)
        _compare_column_types(old["valueType"], new["valueType"], (*path, "value"), found)
    elif old != new:
        _atomic_change(old, new, path, found)
