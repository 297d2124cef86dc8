"""The files of a table location, on a local disk or an object store, read without a JVM.

One interface for everything the JVM-free side reads (the `_delta_log` listing, commit and
checksum files, the listing of a table's data files) so the replay window, `status`, the checks
and the sensors work the same on `/lake/...`, `file://`, `s3://`/`s3a://`, `az://`/`abfss://`
and `gs://` locations:

- local folders go through the OS calls (`LocalStorage`, `cdf_platform.deltalog.local_storage`);
- object stores go through `obstore` (`ObjectStorage`, `cdf_platform.deltalog.object_storage`),
  with the options the lake's storage configuration gives the location, the environment's for
  what they leave unset; commit files are fetched concurrently, a batch at a time, and the
  table is listed once: never one request per file.

Both implement `TableStorage` (`cdf_platform.deltalog.table_storage`); `open_storage` picks the
one a location needs.

Example:
    >>> storage = open_storage("s3://bucket/lake/bronze/orders", lake.storage)  # doctest: +SKIP
    >>> [entry.name for entry in storage.list_log()][:2]  # doctest: +SKIP
    ['00000000000000000000.json', '00000000000000000001.json']
    >>> storage.requests  # doctest: +SKIP
    RequestCount(lists=1, gets=0, batches=0)
"""

from __future__ import annotations

from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.local_storage import LocalStorage
from cdf_platform.deltalog.locations import local_path
from cdf_platform.deltalog.object_storage import ObjectStorage
from cdf_platform.deltalog.table_storage import TableStorage


def open_storage(location: str, storage: StorageConfig) -> TableStorage:
    """The storage of a table location: local folder, `file:` URI or object-store URI (with
    the options `storage` gives it).

    Args:
        location: The table's path or URI.
        storage: The lake's object-store options (`ENVIRONMENT_ONLY`: the environment's).
    """
    path = local_path(location)
    if path is not None:
        return LocalStorage(path)
    return ObjectStorage(location, storage.entry_for(location))
