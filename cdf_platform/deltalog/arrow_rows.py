"""Rows as the Arrow tables and Delta schemas `deltalake` writes: a schema is column -> Delta
type name (string, integer, long, double, boolean, timestamp, decimal(p,s)), and every column
is nullable. The control tables, the demo's bronze writers and the tests' tables are written
through these.

Example:
    >>> arrow_table({"id": "long", "amount": "decimal(10,2)"}, [{"id": 1}]).num_rows
    1
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any


def _micros(value: datetime | None) -> int | None:
    # Delta timestamps are UTC instants; a naive datetime is taken as UTC.
    if value is None:
        return None
    aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delta = aware - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_DECIMAL = re.compile(r"decimal\((\d+),\s*(\d+)\)")


def arrow_table(schema: Mapping[str, str], rows: Sequence[Mapping[str, Any]]) -> Any:
    """`rows` as an Arrow table with exactly `schema`'s column types (Delta type names: string,
    integer, long, double, boolean, timestamp, decimal(p,s)); a value a row lacks is NULL."""
    from arro3.core import Array, DataType, Table

    arrow_types = {
        "string": DataType.string(),
        "integer": DataType.int32(),
        "long": DataType.int64(),
        "double": DataType.float64(),
        "boolean": DataType.bool(),
    }
    columns: dict[str, Any] = {}
    for name, delta_type in schema.items():
        values = [row.get(name) for row in rows]
        decimal = _DECIMAL.fullmatch(delta_type)
        # arro3 builds timestamps and decimals only by casting (epoch microseconds, text).
        if delta_type == "timestamp":
            micros = Array([_micros(v) for v in values], DataType.int64())
            columns[name] = micros.cast(DataType.timestamp("us", tz="UTC"))
        elif decimal is not None:
            text = Array([None if v is None else str(v) for v in values], DataType.string())
            precision, scale = int(decimal.group(1)), int(decimal.group(2))
            columns[name] = text.cast(DataType.decimal128(precision, scale))
        else:
            if delta_type == "double":
                values = [None if v is None else float(v) for v in values]
            columns[name] = Array(values, arrow_types[delta_type])
    return Table.from_pydict(columns)


def delta_schema(schema: Mapping[str, str]) -> Any:
    """The deltalake schema of `schema` (column -> Delta type name), every column nullable."""
    from deltalake.schema import Field, PrimitiveType, Schema

    fields = [Field(name, PrimitiveType(kind), nullable=True) for name, kind in schema.items()]
    return Schema(fields)
