"""Every `deltalake` table the platform opens, creates or appends to, with the storage options
configured for its location (`cdf_platform.core.active_storage.options_for`; what they leave
unset, and locations no prefix matches, read the environment as `deltalake` always does).

The control tables, silver's watermark and statistics, the VACUUM guard's history and the
demo's bronze writers all come through here: no other module calls `deltalake.DeltaTable(...)`
or `write_deltalake` on a location.

Example:
    >>> table = open_delta_table("s3://lake-a/_control/load_log")  # doctest: +SKIP
    >>> table.version()  # doctest: +SKIP
    12
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from cdf_platform.core.active_storage import options_for
from cdf_platform.core.errors import StorageUnreachable
from cdf_platform.deltalog.storage import is_local

if TYPE_CHECKING:
    from deltalake import DeltaTable


def delta_storage_options(location: str) -> dict[str, str] | None:
    """`deltalake`'s `storage_options` for `location` (None: the environment's alone)."""
    entry = options_for(location)
    return entry.deltalake_options() if entry is not None else None


@contextmanager
def store_errors_classified(location: str) -> Iterator[None]:
    """An object store's refusal or silence as `StorageUnreachable`; `deltalake`'s own errors
    (no table there, a lost commit race) pass unchanged."""
    from deltalake.exceptions import DeltaError

    try:
        yield
    except (DeltaError, FileNotFoundError):
        raise
    except OSError as err:  # deltalake raises its object-store failures as OSError
        if is_local(location):
            raise
        entry = options_for(location)
        where = entry.describe() if entry is not None else "the environment's settings"
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise StorageUnreachable(
            f"cannot reach the Delta table {location} with {where}: {first}", table=location
        ) from err


def open_delta_table(location: str, version: int | None = None) -> DeltaTable:
    """The `deltalake` table at `location` (at `version`, default the latest).

    Raises:
        TableNotFoundError: no Delta table there (deltalake's).
        StorageUnreachable: the store refused or did not answer.
    """
    from deltalake import DeltaTable

    with store_errors_classified(location):
        return DeltaTable(
            location, version=version, storage_options=delta_storage_options(location)
        )


def create_delta_table(location: str, schema: Any, **options: Any) -> DeltaTable:
    """`DeltaTable.create` at `location` with its storage options (`options`: mode,
    configuration, ...)."""
    from deltalake import DeltaTable

    with store_errors_classified(location):
        return DeltaTable.create(
            location, schema, storage_options=delta_storage_options(location), **options
        )


def write_delta_table(location: str, data: Any, **options: Any) -> None:
    """`write_deltalake` to `location` with its storage options (`options`: mode, ...)."""
    from deltalake import write_deltalake

    with store_errors_classified(location):
        write_deltalake(location, data, storage_options=delta_storage_options(location), **options)
