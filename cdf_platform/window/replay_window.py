"""The exact replay window of a bronze table, and where each consumer stands in it.

docs/design.md section 4. For a table with latest version L, the earliest replayable version E is
the smallest s such that a change-data-feed read of [s, L] returns every change (and so does every
later start). The six criteria that decide it are in `cdf_platform.window.criteria`; the
headroom deadlines in `cdf_platform.window.headroom`.

Everything comes from the log and one listing of the table's files, without Spark: the log is
listed once, each commit parsed at most once, so thousands of commits take well under a second.

Example:
    >>> window = compute_replay_window("/lake/bronze/orders")  # doctest: +SKIP
    >>> window.earliest_replayable_version  # doctest: +SKIP
    41
    >>> report = assess_consumer(window, watermark=40)  # doctest: +SKIP
    >>> report.replayable, report.version_lag, round(report.headroom_hours or 0)  # doctest: +SKIP
    (True, 150, 131)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.window.criteria import (
    ReplayCriteria,
    WindowBreak,
    WindowBreakKind,
    as_utc,
    to_datetime,
)
from cdf_platform.window.headroom import DeadlineKind, HeadroomDeadline, headroom_deadlines

__all__ = [
    "ConsumerAssessment",
    "DeadlineKind",
    "HeadroomDeadline",
    "ReplayWindow",
    "WindowBreak",
    "WindowBreakKind",
    "assess_consumer",
    "compute_replay_window",
]

_HOUR_SECONDS = 3600.0


@dataclass(frozen=True)
class ReplayWindow:
    """The replay window of one table at one instant.

    Attributes:
        table_path: Local path of the table.
        table_id: The table's id (a different id than a pipeline saw before: SourceReset).
        latest_version: L.
        earliest_replayable_version: E, the smallest s from which a CDF read of [s, L] (and from
            every later start) returns every change; L + 1 when even [L, L] cannot be read.
        deleted_file_retention: Current `delta.deletedFileRetentionDuration`.
        log_retention: Current `delta.logRetentionDuration`.
        cdf_enabled_at_latest: Whether `delta.enableChangeDataFeed` is on at L.
        computed_at: The instant the time-travel limit was evaluated at.

    Example:
        >>> window = compute_replay_window("/lake/bronze/orders")  # doctest: +SKIP
        >>> window.break_for(watermark + 1) is None  # doctest: +SKIP
        True
    """

    table_path: str
    table_id: str
    latest_version: int
    earliest_replayable_version: int
    deleted_file_retention: timedelta
    log_retention: timedelta
    cdf_enabled_at_latest: bool
    computed_at: datetime
    criteria: ReplayCriteria = field(repr=False, compare=False)

    @property
    def log(self) -> DeltaLog:
        """The log view the window was computed from."""
        return self.criteria.log

    def break_for(self, start_version: int) -> WindowBreak | None:
        """The first violated criterion for a CDF read of [start_version, L], or None.

        Criteria are checked in the order of docs/design.md (snapshot, commit files, time-travel
        limit, files, CDF, schema). None when there is nothing to read (start_version > L) or
        start_version >= E. Below E the answer is exact for that start; it is None there only
        if commit timestamps go backwards (clock skew): E is then conservative.

        Raises:
            ValueError: start_version is negative.
        """
        if start_version < 0:
            raise ValueError(f"start version must be >= 0, got {start_version}")
        if start_version > self.latest_version or start_version >= self.earliest_replayable_version:
            return None
        return self.criteria.first_break(start_version)

    def break_for_consumer(self, watermark: int) -> WindowBreak | None:
        """What stops a consumer at `watermark` from continuing incrementally, or None.

        `break_for(watermark + 1)`, plus a non-additive schema change in version watermark + 1
        itself: Delta reads [W + 1, L] fine (it checks schema changes after the start only), but
        silver was built on the schema before it, and a dropped or renamed column would keep
        stale values there instead of being retired by a rebuild.
        """
        start = watermark + 1
        found = self.break_for(start)
        if found is not None or start > self.latest_version or start == 0:
            return found
        change = self.criteria.schema_change(start)
        if change is None:
            return None
        return WindowBreak(
            WindowBreakKind.SCHEMA_CHANGE,
            start,
            f"version {start}: {change} (silver follows the schema before it)",
        )

    def timestamp_of(self, version: int) -> datetime | None:
        """Delta's timestamp of `version` (in-commit timestamp, else commit-file mtime).

        None when the commit file is gone.
        """
        timestamp_ms = self.log.commit_timestamp_ms(version)
        return to_datetime(timestamp_ms) if timestamp_ms is not None else None


def compute_replay_window(
    table_path: str,
    now: datetime | None = None,
    *,
    log: DeltaLog | None = None,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> ReplayWindow:
    """The exact replay window of the Delta table at `table_path` at instant `now`.

    Args:
        table_path: Path or URI of the bronze table (local, `file:`, `s3://`, ...).
        now: The instant to evaluate the time-travel limit at; defaults to the current time.
            A naive datetime is taken as UTC.
        log: The table's log, when the caller has already listed it.
        storage: The lake's object-store options, to list the log with otherwise.

    Raises:
        SourceNotFound: the path holds no Delta table.
    """
    moment = as_utc(now)
    log = log or DeltaLog(table_path, storage)
    latest = log.latest_metadata()
    criteria = ReplayCriteria(log, moment, log.deleted_file_retention())
    return ReplayWindow(
        table_path=log.table_path,
        table_id=latest.table_id,
        latest_version=log.latest_version(),
        earliest_replayable_version=criteria.earliest_replayable(),
        deleted_file_retention=criteria.retention,
        log_retention=log.log_retention(),
        cdf_enabled_at_latest=latest.cdf_enabled,
        computed_at=moment,
        criteria=criteria,
    )


@dataclass(frozen=True)
class ConsumerAssessment:
    """Lag, replayability and headroom of one consumer (a pipeline with watermark W).

    Lag is measured from the first *unprocessed* commit W + 1, never from bronze's last commit.

    Attributes:
        watermark: W, the last bronze version applied. None: never ran; it will start from a
            snapshot, so it is replayable and every version 0..L counts as unprocessed.
        latest_version: L.
        version_lag: L - W (0 when caught up, also when W > L, a SourceReset the caller
            detects by comparing watermark and latest_version).
        data_version_lag: Data-changing commits in (W, L] (OPTIMIZE, VACUUM START/END and
            property changes count as versions, not data). Commit files already gone are not
            counted; the window break reports them.
        lag_hours: now - timestamp(W + 1) in hours; 0 when caught up.
        first_unprocessed_version: W + 1, or None when caught up.
        first_unprocessed_timestamp: timestamp(W + 1), or None when caught up.
        first_unprocessed_timestamp_exact: False when the commit file of W + 1 is gone: the
            timestamp is then that of the next surviving commit, which is later, so lag_hours
            is a lower bound (and headroom an upper bound).
        earliest_replayable_version: E.
        replayable: W >= L or W + 1 >= E (or never ran).
        window_break: Why [W + 1, L] cannot be replayed (first violated criterion), or None.
        headroom_hours: Hours until W + 1 leaves the window, the first of `deadlines`; at most
            0 once it has left. None when nothing waits to be replayed (caught up or never ran):
            the clock only starts with the next commit.
        deadlines: Every deadline found, earliest first (empty when headroom is None).
    """

    watermark: int | None
    latest_version: int
    version_lag: int
    data_version_lag: int
    lag_hours: float
    first_unprocessed_version: int | None
    first_unprocessed_timestamp: datetime | None
    first_unprocessed_timestamp_exact: bool
    earliest_replayable_version: int
    replayable: bool
    window_break: WindowBreak | None
    headroom_hours: float | None
    deadlines: tuple[HeadroomDeadline, ...]


def assess_consumer(
    window: ReplayWindow, watermark: int | None, now: datetime | None = None
) -> ConsumerAssessment:
    """Where a consumer with watermark `watermark` stands in `window`.

    Args:
        window: The bronze table's replay window (its parsed log is reused).
        watermark: The consumer's watermark W, or None if it never ran.
        now: The instant lag and headroom are measured at; defaults to `window.computed_at`.
    """
    moment = as_utc(now) if now is not None else window.computed_at
    log, latest = window.log, window.latest_version
    start = 0 if watermark is None else watermark + 1
    caught_up = start > latest

    first_timestamp, exact = None, True
    if not caught_up:
        first_timestamp, exact = _first_unprocessed_timestamp(window, start)
    lag_hours = 0.0
    if first_timestamp is not None:
        lag_hours = max(0.0, (moment - first_timestamp).total_seconds() / _HOUR_SECONDS)
    data_lag = sum(
        1
        for version in range(start, latest + 1)
        if log.has_commit(version) and log.commit(version).has_data_change
    )
    window_break = None if watermark is None else window.break_for_consumer(watermark)
    replayable = watermark is None or caught_up or start >= window.earliest_replayable_version

    deadlines: tuple[HeadroomDeadline, ...] = ()
    headroom: float | None = None
    if watermark is not None and not caught_up and first_timestamp is not None:
        deadlines = headroom_deadlines(
            log, start, first_timestamp, window.deleted_file_retention, window.log_retention
        )
        headroom = (deadlines[0].at - moment).total_seconds() / _HOUR_SECONDS
        if not replayable or window_break is not None:
            headroom = min(headroom, 0.0)
    return ConsumerAssessment(
        watermark=watermark,
        latest_version=latest,
        version_lag=max(0, latest - start + 1),
        data_version_lag=data_lag,
        lag_hours=lag_hours,
        first_unprocessed_version=None if caught_up else start,
        first_unprocessed_timestamp=first_timestamp,
        first_unprocessed_timestamp_exact=exact,
        earliest_replayable_version=window.earliest_replayable_version,
        replayable=replayable,
        window_break=window_break,
        headroom_hours=headroom,
        deadlines=deadlines,
    )


def _first_unprocessed_timestamp(window: ReplayWindow, start: int) -> tuple[datetime | None, bool]:
    """(timestamp of `start`, True), or (the next surviving commit's timestamp, False)."""
    exact = window.timestamp_of(start)
    if exact is not None:
        return exact, True
    versions = window.log.commit_versions()
    index = bisect.bisect_right(versions, start)
    if index == len(versions):
        return None, False
    return window.timestamp_of(versions[index]), False
