"""Headroom: when a consumer's first unprocessed version leaves the replay window.

docs/design.md section 4: headroom is the time until W + 1 leaves the window if nothing else
happens, the earliest of three deadlines (`DeadlineKind`). Reported so an operator sees the loss
coming days before it happens.

Example:
    >>> deadlines = headroom_deadlines(log, 41, first_time, timedelta(days=7),
    ...                                timedelta(days=30))  # doctest: +SKIP
    >>> deadlines[0].kind  # doctest: +SKIP
    <DeadlineKind.DELETED_FILE_RETENTION: 'DELETED_FILE_RETENTION'>
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from cdf_platform.deltalog.log import DeltaLog


class DeadlineKind(StrEnum):
    """What takes W + 1 out of the replay window at a deadline."""

    # timestamp(W + 1) + deletedFileRetentionDuration: time travel to W + 1 is refused, and
    # VACUUM may delete its `_change_data` files, which it treats as untracked files and deletes
    # by mtime as soon as they are older than the retention.
    DELETED_FILE_RETENTION = "DELETED_FILE_RETENTION"
    # remove.deletionTimestamp + deletedFileRetentionDuration of a needed data or
    # deletion-vector file that is no longer live: VACUUM then deletes it.
    TOMBSTONE_EXPIRY = "TOMBSTONE_EXPIRY"
    # timestamp(W + 1) + logRetentionDuration: log cleanup at a checkpoint may delete the commit.
    # Delta 4.4 refuses a logRetentionDuration below deletedFileRetentionDuration, so on tables
    # it writes this never comes first; other writers and older settings may allow it.
    LOG_RETENTION = "LOG_RETENTION"


@dataclass(frozen=True)
class HeadroomDeadline:
    """One moment at which the consumer's first unprocessed version may leave the window.

    Attributes:
        kind: What happens then.
        at: When (aware UTC).
        detail: Which version or file, and which property sets the deadline.
    """

    kind: DeadlineKind
    at: datetime
    detail: str


def headroom_deadlines(
    log: DeltaLog,
    start: int,
    first_timestamp: datetime,
    deleted_file_retention: timedelta,
    log_retention: timedelta,
) -> tuple[HeadroomDeadline, ...]:
    """The deadlines of a replay of [start, L], earliest first.

    Args:
        log: The table's log view.
        start: W + 1, the consumer's first unprocessed version.
        first_timestamp: Delta's timestamp of `start`.
        deleted_file_retention: Current `delta.deletedFileRetentionDuration`.
        log_retention: Current `delta.logRetentionDuration`.
    """
    deadlines = [
        HeadroomDeadline(
            DeadlineKind.DELETED_FILE_RETENTION,
            first_timestamp + deleted_file_retention,
            f"version {start} becomes older than delta.deletedFileRetentionDuration "
            f"({deleted_file_retention}): CDF reads from it fail and VACUUM may delete its "
            "_change_data files",
        ),
        HeadroomDeadline(
            DeadlineKind.LOG_RETENTION,
            first_timestamp + log_retention,
            f"log cleanup may delete commit {start} once it is older than "
            f"delta.logRetentionDuration ({log_retention}) and a later checkpoint exists",
        ),
    ]
    tombstone = earliest_needed_tombstone(log, start)
    if tombstone is not None:
        removed_ms, path, version = tombstone
        removed = datetime.fromtimestamp(removed_ms / 1000, tz=UTC)
        deadlines.append(
            HeadroomDeadline(
                DeadlineKind.TOMBSTONE_EXPIRY,
                removed + deleted_file_retention,
                f"{path}, needed by version {version}, was removed at {removed.isoformat()}; "
                f"VACUUM may delete it after delta.deletedFileRetentionDuration "
                f"({deleted_file_retention})",
            )
        )
    return tuple(sorted(deadlines, key=lambda deadline: deadline.at))


def earliest_needed_tombstone(log: DeltaLog, start: int) -> tuple[int, str, int] | None:
    """(removal ms, path, needing version) of the first-removed file a replay from `start` needs.

    Only files that are no longer live at L count: VACUUM keeps live files (including ones a
    later commit re-added, as RESTORE does), and `_change_data` files, never live, are covered by
    the DELETED_FILE_RETENTION deadline. A remove without deletionTimestamp counts from its
    commit's timestamp.
    """
    removed_at: dict[str, int | None] = {}  # path -> removal time; None while live
    needed: dict[str, int] = {}  # path -> first version whose CDF read needs it
    for version in range(start, log.latest_version() + 1):
        if not log.has_commit(version):
            continue
        commit = log.commit(version)
        # Delta logs a file's remove before its re-add (a deletion-vector update), so handling
        # adds after removes leaves such a file live, with only its old vector tombstoned.
        for action in commit.removes:
            removal = action.deletion_timestamp_ms or commit.timestamp_ms
            removed_at[action.path] = removal
            if action.deletion_vector and action.deletion_vector.file_path:
                removed_at[action.deletion_vector.file_path] = removal
        for action in commit.adds:
            removed_at[action.path] = None
            if action.deletion_vector and action.deletion_vector.file_path:
                removed_at[action.deletion_vector.file_path] = None
        for action in commit.files_read_by_cdf():
            needed.setdefault(action.path, version)
            if action.deletion_vector and action.deletion_vector.file_path:
                needed.setdefault(action.deletion_vector.file_path, version)
    candidates: list[tuple[int, str, int]] = []
    for path, version in needed.items():
        removed = removed_at.get(path)
        if removed is not None:
            candidates.append((removed, path, version))
    return min(candidates) if candidates else None
