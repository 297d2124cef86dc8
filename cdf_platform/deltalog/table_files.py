"""What the JVM-free side reads from a table location, whatever stores it: the forms a location
takes (a local path, a `file:` URI, or an object-store URI: `s3://`/`s3a://`/`s3n://`,
`az://`/`abfss://`, `gs://`), the `TableStorage` interface, the files it lists and the requests
it counts.

`LocalStorage` and `ObjectStorage` (`cdf_platform.deltalog.table_storage`) implement it;
`open_storage` (same module) picks the one a location needs.

Modification times: a local file's mtime (what Hadoop's local FileSystem reports) and an
object's `LastModified` (what S3A reports, whole seconds) are exactly what delta-spark uses as a
commit's timestamp when in-commit timestamps are off, so the replay window agrees with Spark.

Example:
    >>> is_local("/lake/bronze/orders"), is_local("s3://bucket/lake/bronze/orders")
    (True, False)
    >>> same_object_store_root("s3a://bucket/t/part-0.parquet", "s3://bucket/t")
    'part-0.parquet'
    >>> [entry.name for entry in storage.list_log()][:2]  # doctest: +SKIP
    ['00000000000000000000.json', '00000000000000000001.json']
    >>> storage.requests  # doctest: +SKIP
    RequestCount(lists=1, gets=0, batches=0)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlparse

LOG_FOLDER = "_delta_log"
# Schemes that name the same S3 objects (Hadoop's connectors; obstore reads s3:// and s3a://).
_S3_SCHEMES = ("s3", "s3a", "s3n")


def is_local(location: str) -> bool:
    """Whether `location` is a local path or a `file:` URI (not an object store)."""
    return urlparse(location).scheme in ("", "file") or _is_windows_drive(location)


def _is_windows_drive(location: str) -> bool:
    return len(location) > 1 and location[1] == ":" and location[0].isalpha()


def local_path(location: str) -> str | None:
    """The local filesystem path behind `location`, or None for an object-store URI."""
    if not is_local(location):
        return None
    parsed = urlparse(location)
    return parsed.path if parsed.scheme == "file" else location


def same_object_store_root(path: str, root: str) -> str | None:
    """`path` relative to the object-store folder `root`, or None when it is not under it.

    `s3://`, `s3a://` and `s3n://` name the same objects, so `s3a://b/t/x` is under `s3://b/t`.
    """
    given, base = urlparse(path), urlparse(root)

    def family(scheme: str) -> str:
        return "s3" if scheme in _S3_SCHEMES else scheme

    if family(given.scheme) != family(base.scheme) or given.netloc != base.netloc:
        return None
    prefix = base.path.rstrip("/") + "/"
    return given.path[len(prefix) :] if given.path.startswith(prefix) else None


@dataclass(frozen=True)
class StoredFile:
    """One file of a listing.

    Attributes:
        name: Path relative to the listed folder (posix separators).
        modified_ms: Modification time (local mtime, or the object's LastModified), epoch ms.
    """

    name: str
    modified_ms: int


@dataclass
class RequestCount:
    """Storage requests one `TableStorage` made: listing pages and file reads, and the batches
    those reads came in (`read_many` calls that reached the store: on an object store each is
    one concurrent sweep that waits for its slowest GET)."""

    lists: int = 0
    gets: int = 0
    batches: int = 0


class TableStorage(Protocol):
    """What the JVM-free side reads from a table location (implemented in
    `cdf_platform.deltalog.table_storage`)."""

    root: str
    requests: RequestCount

    def list_log(self) -> list[StoredFile]:
        """The files directly in `_delta_log` (empty when it does not exist)."""
        ...

    def list_table(self) -> Iterator[str]:
        """Every file under the root outside `_delta_log`, relative, posix separators."""
        ...

    def list_root(self) -> list[str]:
        """The names directly under the root (files and folders; empty when absent)."""
        ...

    def read(self, relative: str) -> bytes:
        """A whole file under the root.

        Raises:
            FileNotFoundError: the file does not exist.
        """
        ...

    def read_many(self, relatives: Iterable[str]) -> dict[str, bytes]:
        """Several files, fetched concurrently where that pays; absent files are left out."""
        ...

    def exists_outside(self, location: str) -> bool:
        """Whether a file outside the root exists (an absolute path a log action names)."""
        ...

    def relative(self, location: str) -> str | None:
        """`location` relative to the root, or None when it is elsewhere."""
        ...
