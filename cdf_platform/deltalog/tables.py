"""Table-level facts read from storage without a JVM: is there a Delta table at a location, and
does a location hold files that are not one. Local folders and object stores alike.
"""

from __future__ import annotations

from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.table_files import LOG_FOLDER
from cdf_platform.deltalog.table_storage import open_storage

# What makes a `_delta_log` a table's: a commit, or a checkpoint (after log cleanup).
_LOG_ENTRY_SUFFIXES = (".json", ".checkpoint.parquet")


def is_delta_table(location: str, storage: StorageConfig) -> bool:
    """Whether `location` holds a Delta table (a `_delta_log` with a commit or checkpoint),
    read with the options `storage` gives it."""
    entries = open_storage(location, storage).list_log()
    return any(entry.name.endswith(_LOG_ENTRY_SUFFIXES) for entry in entries)


def holds_foreign_files(location: str, storage: StorageConfig) -> bool:
    """Whether `location` is a file, or a non-empty folder without a `_delta_log`: no Delta
    table can be created there. False for a folder whose `_delta_log` exists (a table, or one
    being created) and for an empty or absent location. Read with the options `storage` gives
    it."""
    names = open_storage(location, storage).list_root()
    return bool(names) and LOG_FOLDER not in names
