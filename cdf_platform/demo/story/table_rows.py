"""The demo's own oracle: the rows of a Delta table read by a second engine (deltalake's), not
the Spark that wrote silver, so the story compares silver and bronze row for row.

Example:
    >>> silver = "/lake/silver/orders"
    >>> columns = data_columns(silver, lake.storage)  # doctest: +SKIP
    >>> table_rows(silver, columns, lake.storage, live_only=True).total()  # doctest: +SKIP
    120
"""

from collections import Counter
from typing import Any

from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.delta_tables import open_delta_table


def data_columns(path: str, storage: StorageConfig) -> list[str]:
    """The table's columns that are not the platform's bookkeeping (`_...`)."""
    fields = open_delta_table(path, storage).schema().fields
    return [f.name for f in fields if not f.name.startswith("_")]


def table_rows(
    path: str,
    columns: list[str],
    storage: StorageConfig,
    *,
    version: int | None = None,
    live_only: bool = False,
) -> Counter[tuple[Any, ...]]:
    """The rows of the Delta table at `path` (at `version`) as a multiset of `columns`;
    `live_only` leaves out soft-deleted rows. Read by deltalake, no JVM, with the lake's
    object-store options `storage`."""
    from deltalake import QueryBuilder

    table = open_delta_table(path, storage, version=version)
    soft_deletes = "_is_deleted" in {f.name for f in table.schema().fields}
    selected = ", ".join(f'"{column}"' for column in columns)
    where = ' WHERE NOT "_is_deleted"' if live_only and soft_deletes else ""
    result = QueryBuilder().register("t", table).execute(f"SELECT {selected} FROM t{where}")
    values = [column.to_pylist() for column in result.read_all().columns]
    return Counter(zip(*values, strict=True))
