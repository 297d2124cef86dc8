"""Safe references to Delta tables in SQL, and small table-level helpers.

Nothing that comes from configuration is pasted into SQL unquoted: paths go through
`sql_path`, column names through `quote_ident`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse


def quote_ident(name: str) -> str:
    """Backtick-quote one identifier part, doubling embedded backticks."""
    return "`" + name.replace("`", "``") + "`"


def sql_path(path: str) -> str:
    """The SQL reference of the Delta table stored at `path`: delta.`<path>`."""
    return "delta." + quote_ident(path)


def sql_string(value: str) -> str:
    """A single-quoted SQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def local_path(path: str) -> str | None:
    """The local filesystem path behind `path`, or None for a remote URI (s3a://, abfss://)."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else path
    return None


def is_delta_table(path: str) -> bool:
    """Whether `path` holds a Delta table (has a `_delta_log` with at least one entry).

    JVM-free for local paths; remote URIs go through `deltalake`.
    """
    local = local_path(path)
    if local is not None:
        log_dir = os.path.join(local, "_delta_log")
        return os.path.isdir(log_dir) and any(
            name.endswith((".json", ".checkpoint.parquet")) for name in os.listdir(log_dir)
        )
    from deltalake import DeltaTable

    return bool(DeltaTable.is_deltatable(path))


def holds_foreign_files(path: str) -> bool:
    """Whether local `path` is a file, or a non-empty folder without a `_delta_log` folder: no
    Delta table can be created there. False for remote URIs (not checked JVM-free) and for a
    folder whose `_delta_log` exists (a table, or one being created)."""
    local = local_path(path)
    if local is None or not os.path.exists(local):
        return False
    if not os.path.isdir(local):
        return True
    entries = os.listdir(local)
    return bool(entries) and "_delta_log" not in entries


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
