"""A table folder on the local filesystem, read through the OS calls (a scandir of `_delta_log`
takes milliseconds): the `TableStorage` of local paths and `file:` URIs.

Example:
    >>> storage = LocalStorage("/lake/bronze/orders")  # doctest: +SKIP
    >>> storage.read("_delta_log/00000000000000000000.json")[:10]  # doctest: +SKIP
    b'{"commitIn'
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from cdf_platform.deltalog.locations import local_path
from cdf_platform.deltalog.table_storage import LOG_FOLDER, RequestCount, StoredFile


class LocalStorage:
    """A table folder on the local filesystem, read through the OS calls."""

    def __init__(self, path: str) -> None:
        self.root = os.path.abspath(path)
        self.requests = RequestCount()

    def list_log(self) -> list[StoredFile]:
        """The files directly in `_delta_log` (empty when it does not exist)."""
        self.requests.lists += 1
        try:
            entries = list(os.scandir(os.path.join(self.root, LOG_FOLDER)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for entry in entries:
            try:
                if entry.is_dir():
                    continue
                # Java's File.lastModified (what Hadoop's local FileSystem reports): whole ms.
                modified_ms = entry.stat().st_mtime_ns // 1_000_000
            except FileNotFoundError:
                # Gone since the listing: a writer's temporary file renamed into its commit
                # (deltalake commits `<version>.json#<n>` that way), or a file log cleanup
                # deleted. The listing is a moment's view either way.
                continue
            found.append(StoredFile(entry.name, modified_ms))
        return found

    def list_table(self) -> Iterator[str]:
        """Every file under the root outside `_delta_log`, relative, posix separators."""
        self.requests.lists += 1
        for folder, dirs, files in os.walk(self.root):
            if folder == self.root and LOG_FOLDER in dirs:
                dirs.remove(LOG_FOLDER)
            relative_folder = os.path.relpath(folder, self.root)
            for name in files:
                relative = name if relative_folder == "." else os.path.join(relative_folder, name)
                yield relative.replace(os.sep, "/")

    def list_root(self) -> list[str]:
        """The names directly under the root (a file at the root lists as itself)."""
        self.requests.lists += 1
        if os.path.isfile(self.root):
            return [os.path.basename(self.root)]
        try:
            return os.listdir(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read(self, relative: str) -> bytes:
        """A whole file, through the OS calls alone (the JSON parser takes the bytes)."""
        self.requests.gets += 1
        fd = os.open(os.path.join(self.root, relative), os.O_RDONLY)
        try:
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def read_many(self, relatives: Iterable[str]) -> dict[str, bytes]:
        """Several files, one after the other (a local read takes microseconds)."""
        wanted = list(relatives)
        if wanted:
            self.requests.batches += 1
        found: dict[str, bytes] = {}
        for relative in wanted:
            try:
                found[relative] = self.read(relative)
            except FileNotFoundError:
                continue
        return found

    def exists_outside(self, location: str) -> bool:
        """Whether a local file outside the root exists; remote URIs count as present."""
        path = local_path(location)
        return os.path.exists(path) if path is not None else True

    def relative(self, location: str) -> str | None:
        """`location` relative to the root, or None when it is elsewhere."""
        path = local_path(location)
        if path is None:
            return None
        if not os.path.isabs(path):
            return os.path.normpath(path).replace(os.sep, "/")
        relative = os.path.relpath(path, self.root)
        return None if relative.startswith("..") else relative.replace(os.sep, "/")
