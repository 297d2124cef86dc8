"""The files of a table location, on a local disk or an object store, read without a JVM.

One interface (`TableStorage`, `cdf_platform.deltalog.table_files`) for everything the JVM-free
side reads (the `_delta_log` listing, commit and checksum files, the listing of a table's data
files) so the replay window, `status`, the checks and the sensors work the same on `/lake/...`,
`file://`, `s3://`/`s3a://`, `az://`/`abfss://` and `gs://` locations; `open_storage` picks the
one a location needs:

- local folders go through the OS calls (`LocalStorage`: a scandir of `_delta_log` takes
  milliseconds);
- object stores (S3, Azure, GCS) go through `obstore`, the Python face of the Rust
  `object_store` crate that `deltalake` uses too (`ObjectStorage`). Its options are the ones
  the lake's storage configuration gives the location (`StorageConfig.entry_for`, which
  `deltalake`'s openers ask too), and what they leave unset comes from the same environment
  variables as `deltalake`'s (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, ...;
  `AZURE_STORAGE_*`; `GOOGLE_*`). Commit files are fetched concurrently, a batch at a time, and
  the table is listed once: never one request per file. A store that refuses or does not
  answer is a `StorageUnreachable` naming the options used.

Example:
    >>> storage = open_storage("s3://bucket/lake/bronze/orders", lake.storage)  # doctest: +SKIP
    >>> [entry.name for entry in storage.list_log()][:2]  # doctest: +SKIP
    ['00000000000000000000.json', '00000000000000000001.json']
    >>> storage.requests  # doctest: +SKIP
    RequestCount(lists=1, gets=0, batches=0)
    >>> LocalStorage("/lake/bronze/orders").read(  # doctest: +SKIP
    ...     "_delta_log/00000000000000000000.json"
    ... )[:10]
    b'{"commitIn'
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from cdf_platform.core.errors import StorageUnreachable
from cdf_platform.core.storage import StorageConfig, StorageEntry
from cdf_platform.deltalog.commit_cache import CommitCache
from cdf_platform.deltalog.table_files import (
    LOG_FOLDER,
    RequestCount,
    StoredFile,
    TableStorage,
    local_path,
    same_object_store_root,
)

if TYPE_CHECKING:
    from obstore.store import ObjectStore


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


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Concurrent GETs per batch against an object store: a GET costs 20-50 ms on S3, so a
# 2,000-commit log read one by one would take a minute. With a 25 ms round trip added to every
# request, 64 in flight read 2,000 commits faster than 32 (bench/object_store.py); at a 20 ms
# round trip they ask 3,200 GETs/s, under the 5,500 per prefix S3 serves.
FETCH_CONCURRENCY = 64
# S3 ListObjectsV2 returns at most 1,000 keys per response (Azure 5,000, GCS 1,000): the
# request count of a listing is its page count.
LIST_PAGE_SIZE = 1000
# A listing's start-after key past every log file Delta writes (digits, letters, "_", "." and
# "-" all sort below "~"), and below "_delta_log0", the least key outside the log above it.
_LOG_SKIP = f"{LOG_FOLDER}/~"


class ObjectStorage:
    """A table folder on an object store (S3, Azure, GCS), read through `obstore`.

    Args:
        uri: The table's URI (`s3://bucket/lake/bronze/orders`, `s3a://...`, `abfss://...`).
        options: The store options (the storage entry the lake's configuration gives `uri`,
            `StorageConfig.entry_for`), None for the environment's alone. What they leave
            unset comes from the environment.
        cache: Where log files read before are kept (`CommitCache`), None for no cache;
            by default the one the environment configures.
        concurrency: GETs in flight at once when several files are read.
    """

    def __init__(
        self,
        uri: str,
        options: StorageEntry | None,
        cache: CommitCache | Literal["environment"] | None = "environment",
        concurrency: int = FETCH_CONCURRENCY,
    ) -> None:
        from obstore.store import from_url  # deferred: only object-store locations need it

        self.root = uri.rstrip("/")
        self.requests = RequestCount()
        self.concurrency = concurrency
        self.cache = CommitCache.from_environment() if cache == "environment" else cache
        self.options = options
        # ETags of the log files listed, for the commit cache.
        self._etags: dict[str, str] = {}
        self._pruned = False
        config = self.options.obstore_config() if self.options else None
        client = self.options.obstore_client_options() if self.options else None
        with self._classified("open"):
            # The config's type is per-scheme (S3Config, AzureConfig, ...); keys are obstore's.
            self._store: ObjectStore = from_url(
                self.root,
                config=cast(Any, config or None),
                client_options=cast(Any, client or None),
            )

    @contextmanager
    def _classified(self, action: str) -> Iterator[None]:
        """Raise a store's refusal or silence inside the block as `StorageUnreachable` (an
        absent object stays a `FileNotFoundError`)."""
        from obstore.exceptions import BaseError

        try:
            yield
        except FileNotFoundError:
            raise
        except (BaseError, OSError) as err:
            where = self.options.describe() if self.options else "the environment's settings"
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise StorageUnreachable(
                f"cannot {action} {self.root} with {where}: {first}", table=self.root
            ) from err

    def _list(self, prefix: str | None, offset: str | None = None) -> Iterator[dict[str, object]]:
        """The objects under `prefix` (after `offset`, S3's start-after), in key order.

        Pages are fetched as the iteration reaches them, and counted one request each.
        """
        import obstore

        pages = obstore.list(self._store, prefix=prefix, offset=offset, chunk_size=LIST_PAGE_SIZE)
        self.requests.lists += 1  # an empty listing is one request too
        for number in itertools.count():
            # Only the page fetch is the store's: an error the caller raises while the
            # iteration is suspended at `yield` is not a storage failure.
            with self._classified("list"):
                batch = next(pages, None)
            if batch is None:
                return
            if number:
                self.requests.lists += 1
            for meta in batch:
                yield dict(meta)

    def list_log(self) -> list[StoredFile]:
        """The files directly in `_delta_log` (empty when it does not exist)."""
        prefix = f"{LOG_FOLDER}/"
        found = []
        for meta in self._list(prefix):
            name = str(meta["path"])[len(prefix) :]
            if "/" in name:  # e.g. _delta_log/_commits/ or _sidecars/: not log entries
                continue
            if meta.get("e_tag"):
                self._etags[f"{prefix}{name}"] = str(meta["e_tag"])
            modified = cast(datetime, meta["last_modified"])
            # Integer arithmetic: a float timestamp times 1000 can land a millisecond short.
            modified_ms = (modified - _EPOCH) // timedelta(milliseconds=1)
            found.append(StoredFile(name, modified_ms))
        return found

    def list_table(self) -> Iterator[str]:
        """Every object under the root outside `_delta_log`, without listing the log again.

        Keys come in byte order and `_delta_log/` sits among them ("_change_data/" before it,
        "part-..." after), so the table is listed in two parts: from the start up to the first
        log key, then from just past the log. Every key above "_delta_log/" that is not in the
        log is at least "_delta_log0", above the `_LOG_SKIP` offset, so no file is left out;
        a log key past the offset would only be listed and dropped.
        """
        log_prefix = f"{LOG_FOLDER}/"
        for meta in self._list(None):
            path = str(meta["path"])
            if path.startswith(log_prefix):
                break  # the pages past this one are not fetched
            yield path
        else:
            return  # no log in the way: that was the whole table
        for meta in self._list(None, offset=_LOG_SKIP):
            path = str(meta["path"])
            if not path.startswith(log_prefix):
                yield path

    def list_root(self) -> list[str]:
        """The names directly under the root (objects and `folders/`)."""
        import obstore

        self.requests.lists += 1
        with self._classified("list"):
            listed = obstore.list_with_delimiter(self._store)
        names = [prefix.rstrip("/").rsplit("/", 1)[-1] for prefix in listed["common_prefixes"]]
        names += [str(meta["path"]).rsplit("/", 1)[-1] for meta in listed["objects"]]
        return names

    def read(self, relative: str) -> bytes:
        """A whole object.

        Raises:
            FileNotFoundError: no such object (obstore raises it for a 404).
        """
        self.requests.gets += 1
        return self._get(relative)

    def _get(self, relative: str) -> bytes:
        """GET one object, uncounted (the caller counts: threads never share a counter)."""
        import obstore

        with self._classified("read"):
            return bytes(obstore.get(self._store, relative).bytes())

    def read_many(self, relatives: Iterable[str]) -> dict[str, bytes]:
        """Several objects, `concurrency` at a time; absent ones are left out.

        Log files listed with an ETag are served from the commit cache when it holds them,
        and stored there once fetched.
        """
        wanted = list(relatives)
        found: dict[str, bytes] = {}
        if self.cache is not None:
            for relative in wanted:
                etag = self._etags.get(relative)
                cached = self.cache.get(self.root, relative, etag) if etag else None
                if cached is not None:
                    found[relative] = cached
            wanted = [relative for relative in wanted if relative not in found]
        fetched = self._fetch_many(wanted)
        if self.cache is not None and fetched:
            keep = {r: (self._etags[r], b) for r, b in fetched.items() if r in self._etags}
            self.cache.put(self.root, keep)
            if not self._pruned:  # once per listing: drop entries of cleaned-up log files
                self.cache.prune(self.root, self._etags)
                self._pruned = True
        return {**found, **fetched}

    def _fetch_many(self, wanted: list[str]) -> dict[str, bytes]:
        """GET `wanted`, `concurrency` at a time; absent objects are left out."""
        if wanted:
            self.requests.batches += 1
            self.requests.gets += len(wanted)

        def fetch(relative: str) -> tuple[str, bytes | None]:
            try:
                return relative, self._get(relative)
            except FileNotFoundError:
                return relative, None

        if len(wanted) <= 1:
            pairs = [fetch(relative) for relative in wanted]
        else:
            # obstore's calls release the GIL while they wait on the network.
            with ThreadPoolExecutor(min(self.concurrency, len(wanted))) as pool:
                pairs = list(pool.map(fetch, wanted))
        return {relative: body for relative, body in pairs if body is not None}

    def exists_outside(self, location: str) -> bool:
        """Files outside the table (a shallow clone's source) are not listed: count them
        present, as a read of them would be the first to know."""
        return True

    def relative(self, location: str) -> str | None:
        """`location` relative to the root, or None when it is elsewhere."""
        if "://" not in location:
            return location
        return same_object_store_root(location, self.root)


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
