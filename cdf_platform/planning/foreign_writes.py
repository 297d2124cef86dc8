"""Writes to silver the platform did not make, found in silver's log without a JVM.

Anyone can UPDATE, DELETE or INSERT into a silver table directly (a fix by hand, a second job on
the wrong path): the watermark stays where it is, the next run succeeds, and silver differs from
its spec applied to bronze from then on. Every platform write stamps its commit's
`userMetadata` with the run that made it (`cdf_platform.state.watermark.user_metadata`, beside
the txn of the watermark), so a *foreign write* is a commit of silver's log that changes data
(an `add` or `remove` with `dataChange: true`, or a change file) and whose `userMetadata` does
not name the pipeline.

Commits that change no data are never foreign writes, stamped or not: the platform's own
CREATE, ALTER TABLE (new columns, type widenings, table properties) and maintenance (OPTIMIZE,
VACUUM START/END, REORG) are unstamped but write `dataChange: false` or no file at all, and a
property set by someone else changes no row either.

The search starts after the *baseline*, the newest of:
- the silver version the newest settled verification vouches for
  (`cdf_platform.state.verifications.last_verified_silver_version`): silver equalled its spec
  there, so older commits are accounted for;
- silver's newest platform commit that reconciles it with a bronze snapshot (a rebuild, an
  initial load, a snapshot source's run): it makes silver its spec applied to bronze, whatever
  was written before;
- else silver's first version.
It reads only the commits after the baseline, newest first, and stops at the first reconciling
commit, in concurrent blocks that double and never reach below the baseline (on object stores
through the commit cache, so a repeated search fetches only new commits). Commits log cleanup
removed cannot be read: the search then starts at the oldest commit left and says so
(`ForeignWrites.log_cleaned`).

Nothing is changed: status and the checks report what they find; a person runs `verify`
(`--repair`) or a rebuild.

Example:
    >>> found = find_foreign_writes("/lake/silver/orders", "orders", verified=3)  # doctest: +SKIP
    >>> found.summary  # doctest: +SKIP
    'v12 UPDATE, v13 DELETE'
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from cdf_platform.core.errors import SourceNotFound
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.planning.plan import RunMode
from cdf_platform.state.watermark import parse_user_metadata

# The run modes whose commit reconciles silver with a pinned bronze snapshot as a whole. A
# verification's repair is not a baseline here: the verification that made it is one
# (`Baseline.VERIFIED`) once settled.
RECONCILING_MODES = frozenset(
    mode.value for mode in RunMode if mode.reads_snapshot and mode is not RunMode.VERIFY_REPAIR
)


class Baseline(StrEnum):
    """Where the search for foreign writes starts (after this version)."""

    VERIFIED = "verified"
    """The silver version the newest settled verification vouches for."""
    REBUILD = "rebuild"
    """Silver's newest platform commit reconciling it with a bronze snapshot (rebuild, initial
    load, snapshot source's run)."""
    FIRST = "first"
    """Neither: the search covers silver's whole log, from its first version."""


@dataclass(frozen=True)
class ForeignWrite:
    """One commit of silver that changes data and that the platform did not stamp.

    Attributes:
        version: The silver version.
        operation: `commitInfo.operation` (UPDATE, DELETE, WRITE, MERGE, ...), if logged.
        timestamp_ms: Delta's timestamp of the version (`Commit.timestamp_ms`).
    """

    version: int
    operation: str | None
    timestamp_ms: int

    @property
    def label(self) -> str:
        """`v12 UPDATE`: how status and the checks name it."""
        return f"v{self.version} {self.operation or 'UNKNOWN'}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the commit time in ISO 8601, UTC)."""
        committed = datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)
        return {
            "version": self.version,
            "operation": self.operation,
            "committed_at": committed.isoformat(),
        }


@dataclass(frozen=True)
class ForeignWrites:
    """What the search of silver's log found.

    Attributes:
        writes: The foreign writes after the baseline, oldest first.
        baseline: Which version the search started after.
        baseline_version: That version (None for `Baseline.FIRST`).
        searched_from: The oldest silver version read (None: no commit after the baseline).
        log_cleaned: Commits after the baseline are gone from the log (log cleanup): the
            search started at the oldest commit left, and a write before it cannot be seen.
    """

    writes: tuple[ForeignWrite, ...] = ()
    baseline: Baseline = Baseline.FIRST
    baseline_version: int | None = None
    searched_from: int | None = None
    log_cleaned: bool = False

    @property
    def summary(self) -> str | None:
        """`v12 UPDATE, v13 DELETE` (`summarize`), or None when there is none."""
        return summarize(self.writes)

    @property
    def note(self) -> str | None:
        """What the search could not see, if anything (commits gone by log cleanup)."""
        if not self.log_cleaned:
            return None
        return (
            f"silver commits after the {self.baseline.value} baseline are gone from its log "
            f"(log cleanup): searched from v{self.searched_from}, the oldest left; run "
            "`cdf-platform verify` to vouch for what came before"
        )


# How many foreign writes a line of text names; the rest are counted (JSON carries them all).
SHOWN = 10


def summarize(writes: tuple[ForeignWrite, ...]) -> str | None:
    """`v12 UPDATE, v13 DELETE`: the oldest SHOWN writes, then how many more; None for none."""
    if not writes:
        return None
    text = ", ".join(w.label for w in writes[:SHOWN])
    return text if len(writes) <= SHOWN else f"{text} and {len(writes) - SHOWN} more"


NONE_FOUND = ForeignWrites()
"""No silver table, or nothing after the baseline."""


def find_foreign_writes(
    target: str | DeltaLog,
    pipeline_id: str,
    *,
    verified: int | None,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> ForeignWrites:
    """The foreign writes on silver `target` since the baseline (see the module docstring).

    Args:
        target: Silver's location (read with the options `storage` gives it), or its log.
        pipeline_id: The pipeline whose stamp marks the platform's commits.
        verified: The silver version the newest settled verification vouches for, if any.
        storage: The lake's object-store options.

    Raises:
        StorageUnreachable: silver's store refused or did not answer.
    """
    try:
        log = target if isinstance(target, DeltaLog) else DeltaLog(target, storage)
    except SourceNotFound:
        return NONE_FOUND
    start = 0 if verified is None else verified + 1
    baseline = Baseline.FIRST if verified is None else Baseline.VERIFIED
    baseline_version = verified
    latest = log.latest_version()
    versions = log.commit_versions()
    present = versions[bisect.bisect_left(versions, start) :]
    walk = _walk_down(log, present, pipeline_id)
    if walk.reconciled_at is not None:
        baseline, baseline_version = Baseline.REBUILD, walk.reconciled_at
    first = start if baseline_version is None else baseline_version + 1
    log_cleaned = walk.vanished or (
        first <= latest and log.first_missing_commit(first, latest) is not None
    )
    return ForeignWrites(walk.writes, baseline, baseline_version, walk.searched_from, log_cleaned)


@dataclass(frozen=True)
class _Walk:
    """What a walk down silver's log from its newest commit found (`_walk_down`)."""

    writes: tuple[ForeignWrite, ...]
    searched_from: int | None
    reconciled_at: int | None
    vanished: bool


def _walk_down(log: DeltaLog, versions: tuple[int, ...], pipeline_id: str) -> _Walk:
    """Read `versions` (ascending) newest first until a reconciling platform commit, in blocks
    that double (as `DeltaLog` reads ahead) but never below the first of `versions`: the
    commits before the baseline are not read."""
    found: list[ForeignWrite] = []
    searched_from: int | None = None
    high, size = len(versions), DeltaLog.FETCH_BATCH
    try:
        while high > 0:
            low = max(0, high - size)
            block = versions[low:high]
            log.prefetch(list(block))
            for version in reversed(block):
                commit = log.commit(version)
                run = parse_user_metadata(commit.user_metadata, pipeline_id)
                if run is not None and run.get("mode") in RECONCILING_MODES:
                    return _Walk(tuple(reversed(found)), searched_from, version, False)
                searched_from = version
                if run is None and commit.has_data_change:
                    found.append(ForeignWrite(version, commit.operation, commit.timestamp_ms))
            high, size = low, min(2 * size, DeltaLog.MAX_READ_AHEAD)
    except LookupError:  # a commit removed by log cleanup since the listing
        return _Walk(tuple(reversed(found)), searched_from, None, True)
    return _Walk(tuple(reversed(found)), searched_from, None, False)
