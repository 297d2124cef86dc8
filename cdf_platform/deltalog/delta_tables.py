"""Every `deltalake` table the platform opens, creates or appends to, with the storage options
the lake's configuration gives its location (`StorageConfig.entry_for`, passed by the caller;
what they leave unset, and locations no prefix matches, read the environment as `deltalake`
always does).

The control tables, silver's watermark and statistics, the VACUUM guard's history and the
demo's bronze writers all come through here: no other module calls `deltalake.DeltaTable(...)`
or `write_deltalake` on a location.

Example:
    >>> table = open_delta_table("s3://lake-a/_control/load_log", lake.storage)  # doctest: +SKIP
    >>> table.version()  # doctest: +SKIP
    12
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import StorageUnreachable
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.table_files import is_local

if TYPE_CHECKING:
    from deltalake import DeltaTable


def delta_storage_options(location: str, storage: StorageConfig) -> dict[str, str] | None:
    """`deltalake`'s `storage_options` for `location` under `storage` (None: the
    environment's alone)."""
    entry = storage.entry_for(location)
    return entry.deltalake_options() if entry is not None else None


@contextmanager
def store_errors_classified(location: str, storage: StorageConfig) -> Iterator[None]:
    """An object store's refusal or silence as `StorageUnreachable`, naming the options
    `storage` gives `location`; `deltalake`'s own errors (no table there, a lost commit race)
    pass unchanged."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (DeltaError, FileNotFoundError):
        raise
    except OSError as err:  # deltalake raises its object-store failures as OSError
        if is_local(location):
            raise
        entry = storage.entry_for(location)
        where = entry.describe() if entry is not None else "the environment's settings"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StorageUnreachable(
            f"cannot reach the Delta table {location} with {where}: {first}", table=location
        ) from err


def open_delta_table(
    location: str, storage: StorageConfig, version: int | None = None
) -> DeltaTable:
    """The `deltalake` table at `location` (at `version`, default the latest), opened with the
    options `storage` gives it.

    Raises:
        TableNotFoundError: no Delta table there (deltalake's).
        StorageUnreachable: the store refused or did not answer.
    """
    from deltalake import DeltaTable

    with store_errors_classified(location, storage):
        return DeltaTable(
            location, version=version, storage_options=delta_storage_options(location, storage)
        )


def create_delta_table(
    location: str, storage: StorageConfig, schema: Any, **options: Any
) -> DeltaTable:
    """`DeltaTable.create` at `location` with the storage options `storage` gives it
    (`options`: mode, configuration, ...)."""
    from deltalake import DeltaTable

    with store_errors_classified(location, storage):
        return DeltaTable.create(
            location, schema, storage_options=delta_storage_options(location, storage), **options
        )


def write_delta_table(location: str, storage: StorageConfig, data: Any, **options: Any) -> None:
    """`write_deltalake` to `location` with the storage options `storage` gives it
    (`options`: mode, ...)."""
    from deltalake import write_deltalake

    with store_errors_classified(location, storage):
        write_deltalake(
            location, data, storage_options=delta_storage_options(location, storage), **options
        )


def write_opened_table(
    table: DeltaTable, location: str, storage: StorageConfig, data: Any, **options: Any
) -> None:
    """`write_deltalake` to `table`, opened at `location` by `open_delta_table` (with the
    options `storage` gives it), on the version the object holds, which then holds the version
    written (`options`: mode, ...): no second read of the table's log, as a write to its
    location makes."""
    from deltalake import write_deltalake

    with store_errors_classified(location, storage):
        write_deltalake(table, data, **options)


def refresh_delta_table(table: DeltaTable, location: str, storage: StorageConfig) -> None:
    """Bring `table`, opened at `location` by `open_delta_table`, to its latest version,
    reading only the commits after the one it holds.

    Raises:
        StorageUnreachable: the store refused or did not answer.
    """
    with store_errors_classified(location, storage):
        table.update_incremental()
