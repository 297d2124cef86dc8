"""Which schema changes a change-feed replay can carry across, and which it cannot.

A batch CDF read over a range that contains a non-additive schema change is refused by
delta-spark (CDCReader.checkBatchCdfReadSchemaIncompatibility,
DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE / ..._DATA_SCHEMA_CHANGE), and silver could not
apply it anyway. Additive changes (a new column, a column made nullable) flow through.

Columns are matched by their column-mapping physical name when the table has one
(`delta.columnMapping.physicalName`), else by name, the way
DeltaColumnMapping.hasNoColumnMappingSchemaChanges does: a field whose physical name survives
under another logical name was renamed; a physical name that disappears was dropped. Enabling
column mapping gives existing columns their own name as physical name, so it is not a change.

Example:
    >>> non_additive_changes(before, after)  # doctest: +SKIP
    ['column id renamed to ident', 'column s dropped']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cdf_platform.deltalog.actions import COLUMN_MAPPING_PHYSICAL_NAME, TableMetadata


def non_additive_changes(old: TableMetadata, new: TableMetadata) -> list[str]:
    """Human descriptions of every non-additive change from `old` to `new` (empty if none).

    Non-additive: a dropped, renamed or retyped column (at any nesting depth), a column made
    NOT NULL, or different partition columns.
    """
    changes: list[str] = []
    _compare_fields(_fields(old.schema), _fields(new.schema), "", changes)
    old_partitioning = _physical_partitioning(old)
    new_partitioning = _physical_partitioning(new)
    if old_partitioning != new_partitioning:
        changes.append(
            f"partition columns changed from {list(old.partition_columns)} "
            f"to {list(new.partition_columns)}"
        )
    return changes


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
    prefix: str,
    changes: list[str],
) -> None:
    new_by_key = {_key(field): field for field in new_fields}
    for old_field in old_fields:
        name = prefix + str(old_field["name"])
        new_field = new_by_key.get(_key(old_field))
        if new_field is None:
            changes.append(f"column {name} dropped")
            continue
        if new_field["name"] != old_field["name"]:
            changes.append(f"column {name} renamed to {prefix}{new_field['name']}")
        if old_field.get("nullable", True) and not new_field.get("nullable", True):
            changes.append(f"column {name} made NOT NULL")
        _compare_types(old_field["type"], new_field["type"], name, changes)


def _compare_types(old: Any, new: Any, name: str, changes: list[str]) -> None:
    if isinstance(old, Mapping) and isinstance(new, Mapping) and old["type"] == new["type"]:
        kind = old["type"]
        if kind == "struct":
            _compare_fields(_fields(old), _fields(new), name + ".", changes)
        elif kind == "array":
            if old.get("containsNull", True) and not new.get("containsNull", True):
                changes.append(f"array {name} made NOT NULL elements")
            _compare_types(old["elementType"], new["elementType"], name + ".element", changes)
        elif kind == "map":
            if old.get("valueContainsNull", True) and not new.get("valueContainsNull", True):
                changes.append(f"map {name} made NOT NULL values")
            _compare_types(old["keyType"], new["keyType"], name + ".key", changes)
            _compare_types(old["valueType"], new["valueType"], name + ".value", changes)
        elif old != new:
            changes.append(f"column {name} changed type from {_render(old)} to {_render(new)}")
    elif old != new:
        changes.append(f"column {name} changed type from {_render(old)} to {_render(new)}")


def _render(data_type: Any) -> str:
    if isinstance(data_type, Mapping):
        return str(data_type.get("type", "complex"))
    return str(data_type)
