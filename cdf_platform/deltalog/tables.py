"""Table-level facts read from storage without a JVM: is there a Delta table at a location, and
does a location hold files that are not one.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse


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
