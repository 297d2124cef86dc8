"""A local cache of the `_delta_log` files read from object stores, keyed by their ETag.

A Delta commit file is written once and never changed (a version is created with a
put-if-absent; log cleanup deletes, nothing rewrites). Its listing carries the object's ETag, a
digest of its content, so a file seen before under the same name and ETag has the same bytes:
the checks, sensors and `status` then read from an object store only the commits that are new
since their last evaluation, instead of one GET per commit every time (2,000 GETs take seconds
even against a fast store). A table recreated at the same location writes new objects, with new
ETags: they miss the cache, as they must.

The cache is a folder per table (named by a digest of its URI), one file per log file and
ETag, written through a temporary file and an atomic rename, so concurrent processes (a status
beside a sensor) never read half a file. Entries of log files that are no longer listed (log
cleanup) are removed when new ones are stored. Local tables are never cached: reading them is as
fast as reading the cache.

Location: `$CDF_COMMIT_CACHE`, else `$XDG_CACHE_HOME/cdf_platform/delta_log`, else
`~/.cache/cdf_platform/delta_log`; `CDF_COMMIT_CACHE=off` turns it off.

Example:
    >>> cache = CommitCache.from_environment()  # doctest: +SKIP
    >>> cache.get("s3://b/t", "_delta_log/00000000000000000007.json", '"9dd4e4"')  # doctest: +SKIP
    b'{"commitInfo": ...}'
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

logger = logging.getLogger(__name__)

CACHE_ENV = "CDF_COMMIT_CACHE"
DISABLED = "off"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class CommitCache:
    """Log files of object-store tables, by table URI, file name and ETag (see module doc).

    Args:
        folder: Where the cache lives (created on first store).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    @classmethod
    def from_environment(cls) -> CommitCache | None:
        """The cache the environment configures, or None when it is turned off."""
        configured = os.environ.get(CACHE_ENV, "").strip()
        if configured.lower() == DISABLED:
            return None
        if configured:
            return cls(Path(configured).expanduser())
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        return cls(Path(base) / "cdf_platform" / "delta_log")

    def _entry(self, root: str, name: str, etag: str) -> Path:
        return self.folder / _digest(root) / f"{name.rsplit('/', 1)[-1]}.{_digest(etag)}"

    def get(self, root: str, name: str, etag: str) -> bytes | None:
        """The cached bytes of `name` under table `root` with `etag`, or None."""
        try:
            return self._entry(root, name, etag).read_bytes()
        except OSError:
            return None

    def put(self, root: str, files: dict[str, tuple[str, bytes]]) -> None:
        """Store `files` (name -> (etag, bytes)) of table `root`; a failure only logs."""
        for name, (etag, body) in files.items():
            entry = self._entry(root, name, etag)
            try:
                entry.parent.mkdir(parents=True, exist_ok=True)
                handle, temporary = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
                with os.fdopen(handle, "wb") as out:
                    out.write(body)
                os.replace(temporary, entry)
            except OSError as err:
                logger.warning("commit cache: cannot store %s: %s", entry, err)
                return

    def prune(self, root: str, listed: Iterable[str]) -> None:
        """Remove the entries of table `root` whose file is no longer listed."""
        folder = self.folder / _digest(root)
        names = {name.rsplit("/", 1)[-1] for name in listed}
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            if entry.name.rsplit(".", 1)[0] not in names and not entry.name.startswith(".tmp-"):
                try:
                    os.remove(entry.path)
                except OSError:
                    continue
