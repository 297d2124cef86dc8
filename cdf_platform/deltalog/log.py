"""A read-only, JVM-free view of a Delta table's `_delta_log`.

Everything here goes through one storage layer (`cdf_platform.deltalog.table_storage`: a local
folder or an object store): the log folder is listed once when a `DeltaLog` is built
(`cdf_platform.deltalog.log_listing`), commit files are parsed on demand and cached (fetched a
batch at a time, concurrently, from an object store), and the table's data files are listed once
(on first use) into a set, so questions about thousands of commits are answered without starting
Spark and without one request per file. The only table state kept outside commit files is the
`metaData` and `protocol` of a checkpoint (`cdf_platform.deltalog.checkpoint_state`): read from
the version's `.crc` checksum or, failing that, through the `deltalake` package.

Example:
    >>> log = DeltaLog("/lake/bronze/orders")  # doctest: +SKIP
    >>> log.latest_version(), log.commit(3).operation  # doctest: +SKIP
    (12, 'MERGE')
    >>> log.deleted_file_retention()  # doctest: +SKIP
    datetime.timedelta(days=7)
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property

from cdf_platform.core.errors import SourceLogDamaged, SourceNotFound
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.actions import Commit, TableMetadata, TableProtocol, parse_commit
from cdf_platform.deltalog.checkpoint_state import CheckpointState
from cdf_platform.deltalog.log_listing import LogListing
from cdf_platform.deltalog.retention import (
    DEFAULT_DELETED_FILE_RETENTION,
    DEFAULT_LOG_RETENTION,
    DELETED_FILE_RETENTION_KEY,
    LOG_RETENTION_KEY,
    parse_interval,
)
from cdf_platform.deltalog.table_files import LOG_FOLDER, TableStorage
from cdf_platform.deltalog.table_storage import ObjectStorage, open_storage


class DeltaLog:
    """The `_delta_log` of one Delta table, local or on an object store, read without a JVM.

    The log folder is listed once, at construction: build a new `DeltaLog` to see later
    commits. Commits and metadata are parsed lazily and cached.

    Example:
        >>> log = DeltaLog("s3://bucket/lake/bronze/orders", lake.storage)  # doctest: +SKIP
        >>> [log.commit(v).has_data_change for v in log.commit_versions()]  # doctest: +SKIP
        [False, True, True, False]

    Args:
        table_path: The table's local path or URI (`file:`, `s3://`, `s3a://`, `abfss://`, ...).
        storage: The lake's object-store options to open the table's storage with
            (`open_storage`; default: the environment's alone), or the storage to read
            through.

    Raises:
        SourceNotFound: `table_path` has no `_delta_log` with a commit or checkpoint in it.
    """

    # Commits fetched together when one is missing from the cache: the replay window walks
    # the log one version at a time, up or down, and an object store pays per request. A walk
    # that keeps missing in one direction reads ahead in blocks that double up to
    # MAX_READ_AHEAD, so a cold walk over thousands of commits is a few wide concurrent sweeps
    # (each ends with a wait for its slowest request) rather than dozens of narrow ones, and
    # overshoots the commits it needs by at most one block.
    FETCH_BATCH = 64
    MAX_READ_AHEAD = 1024

    def __init__(
        self, table_path: str, storage: TableStorage | StorageConfig = ENVIRONMENT_ONLY
    ) -> None:
        if isinstance(storage, StorageConfig):
            self.storage = open_storage(table_path, storage)
            config = storage
        else:
            self.storage = storage
            entry = storage.options if isinstance(storage, ObjectStorage) else None
            config = StorageConfig(() if entry is None else (entry,))
        self.table_path = self.storage.root
        self.log_path = f"{self.table_path}/{LOG_FOLDER}"
        listing = LogListing(self.storage.list_log())
        if not listing.entries:
            raise SourceNotFound("no _delta_log folder, or an empty one", table=table_path)
        if not listing.commit_mtime_ms and not listing.checkpoints:
            raise SourceNotFound(
                "no Delta commit or checkpoint found in _delta_log", table=table_path
            )
        self._listing = listing
        self._commit_mtime_ms = listing.commit_mtime_ms
        self._versions = listing.versions
        self._checkpoints = listing.checkpoints
        self._state = CheckpointState(self.storage, config, listing.checksums)
        self._commits: dict[int, Commit] = {}
        self._metadata: dict[int, TableMetadata | None] = {}
        # The size and the version range of the last block read: a miss just past either end
        # continues that walk, and only then does the next block grow.
        self._read_ahead = self.FETCH_BATCH
        self._last_block: tuple[int, int] | None = None

    # -- versions -------------------------------------------------------------------------

    def commit_versions(self) -> tuple[int, ...]:
        """Versions whose commit file is present, ascending."""
        return self._versions

    def checkpoint_versions(self) -> tuple[int, ...]:
        """Versions with a complete checkpoint (classic, all parts of a multi-part, or v2)."""
        return self._checkpoints

    def latest_version(self) -> int:
        """The table's latest version (newest commit file, or newer checkpoint)."""
        return max(self._versions[-1:] + self._checkpoints[-1:])

    def has_commit(self, version: int) -> bool:
        """Whether the commit file of `version` is present."""
        return version in self._commit_mtime_ms

    def commit_file_mtime_ms(self, version: int) -> int | None:
        """The modification time (epoch ms, as listed) of `version`'s commit file; None
        without the file."""
        return self._commit_mtime_ms.get(version)

    def first_missing_commit(self, start: int, end: int) -> int | None:
        """The smallest version in [start, end] whose commit file is absent, or None."""
        return self._listing.first_missing_commit(start, end)

    def latest_checkpoint_at_or_before(self, version: int) -> int | None:
        """The newest complete checkpoint version <= `version`, or None."""
        return self._listing.latest_checkpoint_at_or_before(version)

    def snapshot_gap(self, version: int) -> int | None:
        """The commit that stops Delta from building the snapshot at `version`, or None.

        Delta starts from the newest complete checkpoint c <= version (or from commit 0) and
        needs every commit c+1..version (SnapshotManagement.getLogSegmentForVersion); it does not
        fall back to an older checkpoint when one of those is missing.
        """
        checkpoint = self.latest_checkpoint_at_or_before(version)
        first = 0 if checkpoint is None else checkpoint + 1
        return self.first_missing_commit(first, version)

    # -- commits --------------------------------------------------------------------------

    def commit(self, version: int, *, read_ahead: bool = True) -> Commit:
        """The parsed commit `version` (cached).

        With `read_ahead` False only this commit is read (a reader that needs the newest commit
        or two, not a walk). Otherwise a commit not yet read is fetched together with uncached
        commits around it, concurrently on an object store: the block below it when the commit
        above was read already (a walk down the log), the block above it in the mirror case,
        else FETCH_BATCH on each side.
        A block that continues the previous one (the miss is just past its end) is twice its
        size, up to MAX_READ_AHEAD; any other starts again at FETCH_BATCH.

        Raises:
            LookupError: the commit file is not in `_delta_log`.
        """
        cached = self._commits.get(version)
        if cached is not None:
            return cached
        if version not in self._commit_mtime_ms:
            raise LookupError(f"commit {version} is not in {self.log_path}")
        if not read_ahead:
            self._read_commits([version])
            return self._commits[version]
        index = bisect.bisect_left(self._versions, version)
        last = self._last_block
        continues = last is not None and version in (last[0] - 1, last[1] + 1)
        size = min(2 * self._read_ahead, self.MAX_READ_AHEAD) if continues else self.FETCH_BATCH
        if version + 1 in self._commits:
            low, high = max(0, index - size + 1), index + 1
        elif version - 1 in self._commits:
            low, high = index, index + size
        else:
            size = self.FETCH_BATCH
            low, high = max(0, index - size), index + size + 1
        block = self._versions[low:high]
        self._read_ahead, self._last_block = size, (block[0], block[-1])
        self._read_commits([v for v in block if v not in self._commits])
        return self._commits[version]

    def prefetch(self, versions: list[int]) -> None:
        """Read and cache, concurrently, the commits among `versions` that are present and not
        read yet: for a reader that knows the range it needs (a walk whose read-ahead would
        overshoot it). Nothing else is read.

        Raises:
            LookupError: a listed commit file vanished before it could be read.
        """
        self._read_commits([v for v in versions if v not in self._commits])

    def _read_commits(self, versions: list[int]) -> None:
        """Read and cache the commits `versions` (present ones; fetched concurrently).

        Raises:
            LookupError: a listed commit file vanished before it could be read.
            SourceLogDamaged: a commit file holds something other than Delta actions.
        """
        names = {f"{LOG_FOLDER}/{v:020d}.json": v for v in versions if v in self._commit_mtime_ms}
        bodies = self.storage.read_many(names)
        for name, version in names.items():
            if name not in bodies:
                raise LookupError(f"commit {version} vanished from {self.log_path}")
            try:
                self._commits[version] = parse_commit(
                    version,
                    bodies[name],
                    file_modification_ms=self._commit_mtime_ms[version],
                    table_root=self.table_path,
                )
            except (ValueError, KeyError, TypeError) as err:  # not JSON, or not Delta actions
                raise SourceLogDamaged(
                    f"commit {version} is not a Delta commit file ({type(err).__name__}: {err})",
                    table=self.table_path,
                    action=f"restore commit {version} of the table's _delta_log from a backup, "
                    "or recreate the table; silver is left as it is until then",
                ) from err

    def commit_timestamp_ms(self, version: int) -> int | None:
        """Delta's timestamp of `version` (see `Commit.timestamp_ms`); None without its file."""
        return self.commit(version).timestamp_ms if self.has_commit(version) else None

    # -- metadata and properties ----------------------------------------------------------

    def metadata_at(self, version: int) -> TableMetadata | None:
        """The `metaData` in force at `version`, or None when the log no longer shows it.

        Walks back from `version` to the newest commit with a `metaData` action, or to a
        complete checkpoint (whose state holds it). None means a commit is missing on the way
        and no checkpoint covers it: Delta could not build that snapshot either.
        """
        visited: list[int] = []
        result: TableMetadata | None = None
        current = version
        while current >= 0:
            if current in self._metadata:
                result = self._metadata[current]
                break
            visited.append(current)
            if self.has_commit(current) and (found := self.commit(current).metadata):
                result = found
                break
            if current in self._checkpoints:
                result = self._state.metadata(current)
                break
            if not self.has_commit(current):
                break
            current -= 1
        for seen in visited:
            self._metadata[seen] = result
        return result

    def checksum(self, version: int) -> dict[str, object] | None:
        """The parsed `.crc` checksum of `version` (delta-spark's table state summary: metadata,
        protocol, and often the idempotent-write transactions), or None when absent."""
        return self._state.checksum(version)

    def latest_protocol(self) -> TableProtocol:
        """The protocol (reader/writer versions and features) at the latest version.

        Read from the latest `.crc` checksum when there is one (one small file), else from the
        newest commit with a `protocol` action, else the checkpoint the walk back reaches.

        Raises:
            SourceLogDamaged: a commit is gone so that no protocol reaches the latest version.
        """
        latest = self.latest_version()
        from_checksum = self._state.checksum_protocol(latest)
        if from_checksum is not None:
            return from_checksum
        current = latest
        while current >= 0 and self.has_commit(current):
            found = self.commit(current).protocol
            if found is not None:
                return found
            if current in self._checkpoints:
                break
            current -= 1
        if current not in self._checkpoints:
            raise SourceLogDamaged(
                f"no protocol reaches version {latest}: commit {current} is gone from "
                "_delta_log and no checkpoint or checksum after it records the protocol",
                table=self.table_path,
            )
        return self._state.protocol(current)

    def latest_metadata(self) -> TableMetadata:
        """The metadata at the latest version.

        Raises:
            SourceLogDamaged: a commit is gone so that no metadata reaches the latest version.
        """
        latest = self.latest_version()
        # A commit missing below the latest (criterion 2) breaks the walk back to a metaData
        # action; the latest checksum still records the current metadata.
        metadata = self.metadata_at(latest) or self._state.checksum_metadata(latest)
        if metadata is None:
            raise SourceLogDamaged(
                f"no metaData reaches version {self.latest_version()}: a commit is gone from "
                "_delta_log and no checkpoint or checksum after it records the metadata",
                table=self.table_path,
            )
        return metadata

    def table_id(self) -> str:
        """The table's id (a new id means the table was recreated)."""
        return self.latest_metadata().table_id

    def properties_at(self, version: int) -> Mapping[str, str]:
        """The table properties in force at `version` (empty when unknown)."""
        metadata = self.metadata_at(version)
        return metadata.configuration if metadata is not None else {}

    def properties(self) -> Mapping[str, str]:
        """The current table properties."""
        return self.latest_metadata().configuration

    def schema_at(self, version: int) -> Mapping[str, object] | None:
        """The table schema (Spark JSON StructType) in force at `version`, or None if unknown."""
        metadata = self.metadata_at(version)
        return metadata.schema if metadata is not None else None

    def changes_no_rows(self, start: int, end: int) -> bool:
        """Whether the commits `start..end` leave the table's rows and shape as they were at
        `start - 1`: every commit file is present, none adds or removes a file with
        `dataChange=true` or writes a change file (OPTIMIZE, VACUUM START/END, property and
        protocol changes, checkpoints' companions), and the schema and partitioning at `end`
        are those at `start - 1`. Such a range holds no change for any reader of the table.

        Example:
            >>> log.changes_no_rows(58, 60)  # doctest: +SKIP
            True
        """
        if start < 1 or start > end or self.first_missing_commit(start, end) is not None:
            return False
        if any(self.commit(version).has_data_change for version in range(start, end + 1)):
            return False
        before, after = self.metadata_at(start - 1), self.metadata_at(end)
        return (
            before is not None
            and after is not None
            and before.schema == after.schema
            and before.partition_columns == after.partition_columns
        )

    def deleted_file_retention(self) -> timedelta:
        """Current `delta.deletedFileRetentionDuration` (default 7 days).

        Delta checks time travel and CDF reads against the LATEST snapshot's value
        (SnapshotManagement.enforceTimeTravelWithinDeletedFileRetentionDuration), and VACUUM
        uses the latest value too, so the value at older versions does not matter.
        """
        value = self.latest_metadata().table_property(DELETED_FILE_RETENTION_KEY)
        return parse_interval(value) if value else DEFAULT_DELETED_FILE_RETENTION

    def log_retention(self) -> timedelta:
        """Current `delta.logRetentionDuration` (default 30 days)."""
        value = self.latest_metadata().table_property(LOG_RETENTION_KEY)
        return parse_interval(value) if value else DEFAULT_LOG_RETENTION

    # -- data files ---------------------------------------------------------------------------

    @cached_property
    def table_files(self) -> frozenset[str]:
        """Every file under the table root except `_delta_log`, as relative posix paths.

        Listed once, on first use: one listing instead of a request per needed file.
        """
        return frozenset(self.storage.list_table())

    def file_exists(self, path: str) -> bool:
        """Whether a file exists; `path` is relative to the table root, or absolute (a local
        path or a URI). Files outside the table root of an object store (a shallow clone's
        source) are not listed and count as present."""
        if path in self.table_files:  # the usual case: a relative path as the listing holds it
            return True
        relative = self.storage.relative(path)
        if relative is None:
            return self.storage.exists_outside(path)
        return relative in self.table_files
