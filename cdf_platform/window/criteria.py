"""The six replay-window criteria of docs/design.md section 4, evaluated on a `DeltaLog`.

For a change-data-feed read of [s, L] to return every change, delta-spark 4.4 needs:

1. the snapshot at s can be built (a complete checkpoint c <= s and commits c+1..s, or 0..s);
2. every commit file s..L is present (a batch CDF read silently skips a missing one:
   DeltaLog.getChanges is called with failOnDataLoss = false);
3. timestamp(s) >= now - `delta.deletedFileRetentionDuration` (Delta >= 4.1 refuses older
   starts at load: DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION);
4. every file the read needs still exists (cdc files, else data files with dataChange=true,
   plus deletion-vector files);
5. CDF is enabled at s and not disabled anywhere in (s, L];
6. no schema change in (s, L] that the read refuses: a non-additive one, or a type widening
   (silver follows a widening, but delta-spark 4.4's batch read does not cross it).

`ReplayCriteria` answers them per start version with per-commit caches; `ReplayWindow`
(`cdf_platform.window.replay_window`) is the public face.

Example:
    >>> criteria = ReplayCriteria(DeltaLog(path), now, timedelta(days=7))  # doctest: +SKIP
    >>> criteria.first_break(3)  # doctest: +SKIP
    WindowBreak(kind=<WindowBreakKind.FILES_MISSING: 'FILES_MISSING'>, version=17, detail=...)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.window.schema_compat import SchemaComparison, compare_schemas


class WindowBreakKind(StrEnum):
    """Which replay-window criterion a read violates (in the order they are checked)."""

    SNAPSHOT_UNAVAILABLE = "SNAPSHOT_UNAVAILABLE"
    COMMIT_MISSING = "COMMIT_MISSING"
    TIME_TRAVEL_LIMIT = "TIME_TRAVEL_LIMIT"
    FILES_MISSING = "FILES_MISSING"
    CDF_DISABLED = "CDF_DISABLED"
    SCHEMA_CHANGE = "SCHEMA_CHANGE"


@dataclass(frozen=True)
class WindowBreak:
    """Why a CDF read from some start version through L cannot return every change.

    Attributes:
        kind: The violated criterion. The pipeline maps SCHEMA_CHANGE to
            IncompatibleSchemaChange, CDF_DISABLED to CdfNotEnabled, the rest to
            ReplayWindowLost.
        version: The version where it bites: the start itself (SNAPSHOT_UNAVAILABLE,
            TIME_TRAVEL_LIMIT, CDF off at the start), else the first offending commit.
        detail: What exactly is wrong (which file or commit is missing, which column changed).
    """

    kind: WindowBreakKind
    version: int
    detail: str


def to_datetime(epoch_ms: int) -> datetime:
    """An epoch-milliseconds timestamp as an aware UTC datetime."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def as_utc(moment: datetime | None) -> datetime:
    """`moment` as an aware datetime (naive means UTC); now when None."""
    if moment is None:
        return datetime.now(UTC)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


class ReplayCriteria:
    """The six criteria evaluated against one log at one instant, with per-commit caches.

    Args:
        log: The table's log view.
        now: The instant the time-travel limit (criterion 3) is evaluated at.
        deleted_file_retention: The LATEST `delta.deletedFileRetentionDuration`, which is what
            Delta checks every older version against.
    """

    def __init__(self, log: DeltaLog, now: datetime, deleted_file_retention: timedelta) -> None:
        self.log = log
        self.latest = log.latest_version()
        self.retention = deleted_file_retention
        self.cutoff_ms = int((now - deleted_file_retention).timestamp() * 1000)
        self._missing_file: dict[int, str | None] = {}
        self._schema_change: dict[int, SchemaComparison] = {}

    def snapshot(self, start: int) -> WindowBreak | None:
        """Criterion 1: the snapshot at `start` can be built from the log."""
        gap = self.log.snapshot_gap(start)
        if gap is None:
            return None
        checkpoint = self.log.latest_checkpoint_at_or_before(start)
        base = f"checkpoint {checkpoint}" if checkpoint is not None else "commit 0 (no checkpoint)"
        return WindowBreak(
            WindowBreakKind.SNAPSHOT_UNAVAILABLE,
            start,
            f"the snapshot at version {start} cannot be built: it needs {base} and every later "
            f"commit up to {start}, but commit {gap} is gone from _delta_log",
        )

    def commits(self, start: int) -> WindowBreak | None:
        """Criterion 2: every commit file start..L is present."""
        missing = self.log.first_missing_commit(start, self.latest)
        if missing is None:
            return None
        return WindowBreak(
            WindowBreakKind.COMMIT_MISSING,
            missing,
            f"commit file {missing:020d}.json is gone; a batch CDF read would silently skip "
            "its changes",
        )

    def time_travel(self, start: int) -> WindowBreak | None:
        """Criterion 3: `start` is within deletedFileRetentionDuration of now (or is L)."""
        # SnapshotManagement.enforceTimeTravelWithinDeletedFileRetentionDuration: the latest
        # version is always allowed; older ones need Snapshot.timestamp >= now - retention.
        if start == self.latest:
            return None
        timestamp_ms = self.log.commit(start).timestamp_ms
        if timestamp_ms >= self.cutoff_ms:
            return None
        return WindowBreak(
            WindowBreakKind.TIME_TRAVEL_LIMIT,
            start,
            f"version {start} dates from {to_datetime(timestamp_ms).isoformat()}, older than "
            f"delta.deletedFileRetentionDuration ({self.retention}) before now; Delta refuses "
            "it (DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION)",
        )

    def missing_file(self, version: int) -> str | None:
        """The first file the CDF read of `version` needs that is gone, or None."""
        if version not in self._missing_file:
            found: str | None = None
            for action in self.log.commit(version).files_read_by_cdf():
                vector = action.deletion_vector
                for path in (action.path, vector.file_path if vector else None):
                    if path is not None and not self.log.file_exists(path):
                        found = path
                        break
                if found:
                    break
            self._missing_file[version] = found
        return self._missing_file[version]

    def files(self, start: int) -> WindowBreak | None:
        """Criterion 4: every file the read of start..L needs exists (first gap reported)."""
        for version in range(start, self.latest + 1):
            if (path := self.missing_file(version)) is not None:
                return WindowBreak(
                    WindowBreakKind.FILES_MISSING,
                    version,
                    f"version {version} needs {path}, which no longer exists (VACUUM?)",
                )
        return None

    def cdf_at_start(self, start: int) -> WindowBreak | None:
        """Criterion 5, first half: CDF is enabled in the metadata in force at `start`."""
        metadata = self.log.metadata_at(start)
        if metadata is not None and metadata.cdf_enabled:
            return None
        return WindowBreak(
            WindowBreakKind.CDF_DISABLED,
            start,
            f"delta.enableChangeDataFeed is not true at version {start}: its changes (and "
            "those before) were never recorded",
        )

    def disables_cdf(self, version: int) -> bool:
        """Whether commit `version` writes a metaData with CDF off."""
        metadata = self.log.commit(version).metadata
        return metadata is not None and not metadata.cdf_enabled

    def cdf_in_range(self, start: int) -> WindowBreak | None:
        """Criterion 5, second half: no commit in (start, L] turns CDF off."""
        for version in range(start + 1, self.latest + 1):
            if self.disables_cdf(version):
                return WindowBreak(
                    WindowBreakKind.CDF_DISABLED,
                    version,
                    f"version {version} turned delta.enableChangeDataFeed off",
                )
        return None

    def _schema_comparison(self, version: int) -> SchemaComparison:
        if version not in self._schema_change:
            new = self.log.commit(version).metadata
            old = self.log.metadata_at(version - 1) if new is not None else None
            found = compare_schemas(old, new) if old is not None and new else SchemaComparison()
            self._schema_change[version] = found
        return self._schema_change[version]

    def schema_change(self, version: int) -> str | None:
        """What is non-additive in the schema change of commit `version` (silver cannot follow
        it), or None."""
        return "; ".join(self._schema_comparison(version).non_additive) or None

    def read_schema_change(self, version: int) -> str | None:
        """What in the schema change of commit `version` a batch CDF read refuses to cross
        (non-additive changes and type widenings), or None."""
        return self._schema_comparison(version).blocks_replay

    def schema(self, start: int) -> WindowBreak | None:
        """Criterion 6: no schema change in (start, L] that the read refuses."""
        # CDCReader skips the check at the start version itself: no data before it is read.
        for version in range(start + 1, self.latest + 1):
            if (change := self.read_schema_change(version)) is not None:
                return WindowBreak(
                    WindowBreakKind.SCHEMA_CHANGE, version, f"version {version}: {change}"
                )
        return None

    def first_break(self, start: int) -> WindowBreak | None:
        """The first violated criterion (in criterion order) for a read of [start, L]."""
        for check in (
            self.snapshot,
            self.commits,
            self.time_travel,
            self.files,
            self.cdf_at_start,
            self.cdf_in_range,
            self.schema,
        ):
            if (found := check(start)) is not None:
                return found
        return None

    def earliest_replayable(self) -> int:
        """E: walk down from L while every criterion still holds; L + 1 if even L fails.

        The range criteria (2, 4, 5 for (s, L], 6) only get worse as s decreases, so each step
        adds one commit to them; criteria 1, 3 and 5-at-s are checked at each s.
        """
        start = self.latest
        while start >= 0:
            readable = (
                self.log.has_commit(start)
                and self.snapshot(start) is None
                and self.time_travel(start) is None
                and self.missing_file(start) is None
                and self.cdf_at_start(start) is None
                and (
                    start == self.latest
                    or not (self.disables_cdf(start + 1) or self.read_schema_change(start + 1))
                )
            )
            if not readable:
                break
            start -= 1
        return start + 1
