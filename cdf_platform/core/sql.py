"""Safe references to Delta tables and values in SQL.

Nothing that comes from configuration is pasted into SQL unquoted: paths go through
`sql_path`, column names through `quote_ident`.
"""

from __future__ import annotations

from collections.abc import Mapping


def quote_ident(name: str) -> str:
    """Backtick-quote one identifier part, doubling embedded backticks."""
    return "`" + name.replace("`", "``") + "`"


def sql_path(path: str) -> str:
    """The SQL reference of the Delta table stored at `path`: delta.`<path>`."""
    return "delta." + quote_ident(path)


def sql_string(value: str) -> str:
    """A single-quoted SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def create_table_sql(
    path: str,
    schema: Mapping[str, str],
    properties: Mapping[str, str],
) -> str:
    """CREATE TABLE statement for a Delta table at `path` with `schema` (column -> SQL type)."""
    columns = ", ".join(f"{quote_ident(c)} {t}" for c, t in schema.items())
    props = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in properties.items())
    tblprops = f" TBLPROPERTIES ({props})" if props else ""
    return f"CREATE TABLE IF NOT EXISTS {sql_path(path)} ({columns}) USING DELTA{tblprops}"
