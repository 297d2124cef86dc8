"""A read-only, JVM-free view of a Delta table's `_delta_log`.

Everything here goes through one storage layer (`cdf_platform.deltalog.storage`: a local folder
or an object store): the log folder is listed once when a `DeltaLog` is built, commit files are
parsed on demand and cached (fetched a batch at a time, concurrently, from an object store), and
the table's data files are listed once (on first use) into a set, so questions about thousands
of commits are answered without starting Spark and without one request per file. The only
table state kept outside commit files is the `metaData` and `protocol` of a checkpoint; they are
read from the version's `.crc` checksum (plain JSON that delta-spark writes beside each commit)
or, failing that, through the `deltalake` package.

Example:
    >>> log = DeltaLog("/lake/bronze/orders")  # doctest: +SKIP
    >>> log.latest_version(), log.commit(3).operation  # doctest: +SKIP
    (12, 'MERGE')
    >>> log.deleted_file_retention()  # doctest: +SKIP
    datetime.timedelta(days=7)
"""

from __future__ import annotations

import bisect
import json
import logging
import re
from collections.abc import Mapping
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING

from cdf_platform.core.errors import SourceLogDamaged, SourceNotFound
from cdf_platform.core.storage_options import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.actions import Commit, TableMetadata, TableProtocol, parse_commit
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.deltalog.retention import (
    DEFAULT_DELETED_FILE_RETENTION,
    DEFAULT_LOG_RETENTION,
    DELETED_FILE_RETENTION_KEY,
    LOG_RETENTION_KEY,
    parse_interval,
)
from cdf_platform.deltalog.storage import LOG_FOLDER, ObjectStorage, TableStorage, open_storage

if TYPE_CHECKING:
    from deltalake import DeltaTable

logger = logging.getLogger(__name__)

_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
_CLASSIC_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)$")
_CHECKSUM_FILE = re.compile(r"^(\d{20})\.crc$")


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
            self._config = storage
        else:
            self.storage = storage
            entry = storage.options if isinstance(storage, ObjectStorage) else None
            self._config = StorageConfig(() if entry is None else (entry,))
        self.table_path = self.storage.root
        self.log_path = f"{self.table_path}/{LOG_FOLDER}"
        self._commit_mtime_ms: dict[int, int] = {}
        self._checkpoints: tuple[int, ...] = ()
        self._checksums: set[int] = set()
        if not self._list_log():
            raise SourceNotFound("no _delta_log folder, or an empty one", table=table_path)
        if not self._commit_mtime_ms and not self._checkpoints:
            raise SourceNotFound(
                "no Delta commit or checkpoint found in _delta_log", table=table_path
            )
        self._versions = tuple(sorted(self._commit_mtime_ms))
        self._runs = _contiguous_runs(self._versions)
        self._run_starts = [start for start, _ in self._runs]
        self._commits: dict[int, Commit] = {}
        self._metadata: dict[int, TableMetadata | None] = {}
        # The size and the version range of the last block read: a miss just past either end
        # continues that walk, and only then does the next block grow.
        self._read_ahead = self.FETCH_BATCH
        self._last_block: tuple[int, int] | None = None

    def _list_log(self) -> int:
        """List `_delta_log` once; the number of entries it holds."""
        entries = self.storage.list_log()
        classic: set[int] = set()
        v2: set[int] = set()
        parts: dict[tuple[int, int], set[int]] = {}
        for entry in entries:
            name = entry.name
            if match := _COMMIT_FILE.match(name):
                self._commit_mtime_ms[int(match.group(1))] = entry.modified_ms
            elif match := _CLASSIC_CHECKPOINT.match(name):
                classic.add(int(match.group(1)))
            elif match := _MULTIPART_CHECKPOINT.match(name):
                key = (int(match.group(1)), int(match.group(3)))
                parts.setdefault(key, set()).add(int(match.group(2)))
            elif match := _V2_CHECKPOINT.match(name):
                v2.add(int(match.group(1)))
            elif match := _CHECKSUM_FILE.match(name):
                self._checksums.add(int(match.group(1)))
        # A multi-part checkpoint counts only with every part present (Delta's
        # getLatestCompleteCheckpointFromList); a UUID-named (v2) one by its top-level file.
        complete_parts = {v for (v, n), seen in parts.items() if seen == set(range(1, n + 1))}
        self._checkpoints = tuple(sorted(classic | v2 | complete_parts))
        return len(entries)

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

    def first_missing_commit(self, start: int, end: int) -> int | None:
        """The smallest version in [start, end] whose commit file is absent, or None."""
        if start > end:
            return None
        index = bisect.bisect_right(self._run_starts, start) - 1
        if index < 0 or self._runs[index][1] < start:
            return start
        run_end = self._runs[index][1]
        return None if run_end >= end else run_end + 1

    def latest_checkpoint_at_or_before(self, version: int) -> int | None:
        """The newest complete checkpoint version <= `version`, or None."""
        index = bisect.bisect_right(self._checkpoints, version) - 1
        return self._checkpoints[index] if index >= 0 else None

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

    def _read_commits(self, versions: list[int]) -> None:
        """Read and cache the commits `versions` (present ones; fetched concurrently).

        Raises:
            LookupError: a listed commit file vanished before it could be read.
        """
        names = {f"{LOG_FOLDER}/{v:020d}.json": v for v in versions if v in self._commit_mtime_ms}
        bodies = self.storage.read_many(names)
        for name, version in names.items():
            if name not in bodies:
                raise LookupError(f"commit {version} vanished from {self.log_path}")
            self._commits[version] = parse_commit(
                version,
                bodies[name],
                file_modification_ms=self._commit_mtime_ms[version],
                table_root=self.table_path,
            )

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
                result = self._checkpoint_metadata(current)
                break
            if not self.has_commit(current):
                break
            current -= 1
        for seen in visited:
            self._metadata[seen] = result
        return result

    def _checksum_metadata(self, version: int) -> TableMetadata | None:
        """The metadata recorded in the `.crc` checksum of `version`, if there is one."""
        # delta-spark writes a VersionChecksum (.crc, JSON) with the full metadata beside each
        # commit and reads it itself as a fast path for protocol and metadata.
        checksum = self._checksum(version)
        found = checksum.get("metadata") if checksum else None
        return TableMetadata.from_action(found) if isinstance(found, dict) else None

    def checksum(self, version: int) -> dict[str, object] | None:
        """The parsed `.crc` checksum of `version` (delta-spark's table state summary: metadata,
        protocol, and often the idempotent-write transactions), or None when absent."""
        return self._checksum(version)

    def _checksum(self, version: int) -> dict[str, object] | None:
        """The parsed `.crc` checksum of `version`, or None when absent or unreadable."""
        if version not in self._checksums:
            return None
        name = f"{LOG_FOLDER}/{version:020d}.crc"
        try:
            checksum = json.loads(self.storage.read(name))
        except (OSError, ValueError):
            logger.warning("unreadable checksum %s/%s", self.table_path, name)
            return None
        return checksum if isinstance(checksum, dict) else None

    def _checkpoint_metadata(self, version: int) -> TableMetadata:
        """The metadata of the table state at checkpoint `version`."""
        from_checksum = self._checksum_metadata(version)
        if from_checksum is not None:
            return from_checksum
        table = self._deltalake_table(version)
        meta = table.metadata()
        return TableMetadata(
            table_id=str(meta.id),
            schema=json.loads(table.schema().to_json()),
            partition_columns=tuple(meta.partition_columns),
            configuration=dict(meta.configuration),
        )

    def _deltalake_table(self, version: int) -> DeltaTable:
        """The table at `version` through `deltalake`, for state only a Parquet checkpoint
        holds: it has a Parquet reader (pyarrow is absent). deltalake 1.6 loads the file list
        too (its `without_files` is ignored): slower, but only reached for checkpoints without
        a checksum. Object-store options are the location's, as for our own reads."""
        return open_delta_table(self.table_path, self._config, version=version)

    def latest_protocol(self) -> TableProtocol:
        """The protocol (reader/writer versions and features) at the latest version.

        Read from the latest `.crc` checksum when there is one (one small file), else from the
        newest commit with a `protocol` action, else the checkpoint the walk back reaches.

        Raises:
            SourceLogDamaged: a commit is gone so that no protocol reaches the latest version.
        """
        latest = self.latest_version()
        from_checksum = self._checksum_protocol(latest)
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
        return self._checksum_protocol(current) or self._deltalake_protocol(current)

    def _checksum_protocol(self, version: int) -> TableProtocol | None:
        """The protocol recorded in the `.crc` checksum of `version`, if there is one."""
        checksum = self._checksum(version)
        found = checksum.get("protocol") if checksum else None
        return TableProtocol.from_action(found) if isinstance(found, dict) else None

    def _deltalake_protocol(self, version: int) -> TableProtocol:
        """The protocol of the table state at checkpoint `version`, read by `deltalake`."""
        protocol = self._deltalake_table(version).protocol()
        return TableProtocol(
            min_reader_version=protocol.min_reader_version,
            min_writer_version=protocol.min_writer_version,
            reader_features=tuple(protocol.reader_features or ()),
            writer_features=tuple(protocol.writer_features or ()),
        )

    def latest_metadata(self) -> TableMetadata:
        """The metadata at the latest version.

        Raises:
            SourceLogDamaged: a commit is gone so that no metadata reaches the latest version.
        """
        latest = self.latest_version()
        # A commit missing below the latest (criterion 2) breaks the walk back to a metaData
        # action; the latest checksum still records the current metadata.
        metadata = self.metadata_at(latest) or self._checksum_metadata(latest)
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


def _contiguous_runs(versions: tuple[int, ...]) -> list[tuple[int, int]]:
    """[(first, last), ...] of the runs of consecutive versions in sorted `versions`."""
    runs: list[tuple[int, int]] = []
    for version in versions:
        if runs and runs[-1][1] == version - 1:
            runs[-1] = (runs[-1][0], version)
        else:
            runs.append((version, version))
    return runs
