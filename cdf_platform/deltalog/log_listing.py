"""What one listing of a `_delta_log` folder holds, by kind of file, read without a JVM.

A `DeltaLog` lists its log folder once and asks this listing which commit files are present
(with the modification time Delta dates them by when in-commit timestamps are off), which
checkpoints are complete, which versions have a `.crc` checksum, and where the commits stop
being contiguous.

Example:
    >>> listing = LogListing(storage.list_log())  # doctest: +SKIP
    >>> listing.versions, listing.checkpoints  # doctest: +SKIP
    ((10, 11, 12), (10,))
    >>> listing.first_missing_commit(0, 12)  # doctest: +SKIP
    0
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable

from cdf_platform.deltalog.table_files import StoredFile

_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
_CLASSIC_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.parquet$")
_MULTIPART_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.(\d{10})\.(\d{10})\.parquet$")
_V2_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint\.[0-9a-fA-F-]{36}\.(?:json|parquet)$")
_CHECKSUM_FILE = re.compile(r"^(\d{20})\.crc$")


class LogListing:
    """The files of one `_delta_log` listing, by kind.

    Args:
        entries: The files directly in `_delta_log` (`TableStorage.list_log`).

    Attributes:
        entries: How many files the listing held (of any kind).
        commit_mtime_ms: Version -> modification time (epoch ms) of each commit file present.
        versions: The versions whose commit file is present, ascending.
        checkpoints: The versions with a complete checkpoint (classic, all parts of a
            multi-part, or v2), ascending.
        checksums: The versions with a `.crc` checksum file.
    """

    def __init__(self, entries: Iterable[StoredFile]) -> None:
        self.entries = 0
        self.commit_mtime_ms: dict[int, int] = {}
        self.checksums: set[int] = set()
        classic: set[int] = set()
        v2: set[int] = set()
        parts: dict[tuple[int, int], set[int]] = {}
        for entry in entries:
            self.entries += 1
            name = entry.name
            if match := _COMMIT_FILE.match(name):
                self.commit_mtime_ms[int(match.group(1))] = entry.modified_ms
            elif match := _CLASSIC_CHECKPOINT.match(name):
                classic.add(int(match.group(1)))
            elif match := _MULTIPART_CHECKPOINT.match(name):
                key = (int(match.group(1)), int(match.group(3)))
                parts.setdefault(key, set()).add(int(match.group(2)))
            elif match := _V2_CHECKPOINT.match(name):
                v2.add(int(match.group(1)))
            elif match := _CHECKSUM_FILE.match(name):
                self.checksums.add(int(match.group(1)))
        # A multi-part checkpoint counts only with every part present (Delta's
        # getLatestCompleteCheckpointFromList); a UUID-named (v2) one by its top-level file.
        complete_parts = {v for (v, n), seen in parts.items() if seen == set(range(1, n + 1))}
        self.checkpoints = tuple(sorted(classic | v2 | complete_parts))
        self.versions = tuple(sorted(self.commit_mtime_ms))
        self._runs = _contiguous_runs(self.versions)
        self._run_starts = [start for start, _ in self._runs]

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
        index = bisect.bisect_right(self.checkpoints, version) - 1
        return self.checkpoints[index] if index >= 0 else None


def _contiguous_runs(versions: tuple[int, ...]) -> list[tuple[int, int]]:
    """[(first, last), ...] of the runs of consecutive versions in sorted `versions`."""
    runs: list[tuple[int, int]] = []
    for version in versions:
        if runs and runs[-1][1] == version - 1:
            runs[-1] = (runs[-1][0], version)
        else:
            runs.append((version, version))
    return runs
