"""What the JVM-free side reads from a table location, whatever stores it: the `TableStorage`
interface, the files it lists and the requests it counts.

`LocalStorage` (`cdf_platform.deltalog.local_storage`) and `ObjectStorage`
(`cdf_platform.deltalog.object_storage`) implement it; `open_storage`
(`cdf_platform.deltalog.storage`) picks the one a location needs.

Modification times: a local file's mtime (what Hadoop's local FileSystem reports) and an
object's `LastModified` (what S3A reports, whole seconds) are exactly what delta-spark uses as a
commit's timestamp when in-commit timestamps are off, so the replay window agrees with Spark.

Example:
    >>> [entry.name for entry in storage.list_log()][:2]  # doctest: +SKIP
    ['00000000000000000000.json', '00000000000000000001.json']
    >>> storage.requests  # doctest: +SKIP
    RequestCount(lists=1, gets=0, batches=0)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

LOG_FOLDER = "_delta_log"


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
    """What the JVM-free side reads from a table location (see `cdf_platform.deltalog.storage`)."""

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
