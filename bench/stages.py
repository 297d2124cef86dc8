"""Where a bronze commit's freshness goes: the stages of the silver run that covered it, read
from the load log's marks (`cdf_platform.state.load_log`), without a JVM or Dagster.

A commit's seconds, from its return to the end of the first run whose watermark covers it (the
freshness benchmark's figure), are split into seven stages, each from the latest mark before it
the run has (a stage the run has not reads None, and the next one takes its time):

| stage | from -> to |
|---|---|
| `tick_wait` | the commit -> the run created (the incremental sensor's tick) |
| `queue` | created -> dequeued (the queued run coordinator launched it) |
| `launch` | dequeued -> launched (the run process started: its `RUN_START`) |
| `plan` | launched -> planned (the step started, the pinned plan ready) |
| `read` | planned -> read (the change set read and collapsed; incremental runs only) |
| `merge` | read -> committed (silver's commit landed) |
| `end` | committed -> finished (the run's load-log row written) |

The stages a commit has add up to its freshness. A run of the command line has no created,
dequeued or launched mark: its `launch` runs from the commit to its planning's start.

Functions:

- `commit_stages(log, commit_at, *, version=None, pipeline_id=None) -> CommitStages | None`:
  `log` the load-log rows (`ControlTable.read_log(pipeline_id)`'s dicts; rows of a log
  written before the marks have them null), `commit_at` the commit's return (epoch seconds or
  an aware datetime), `version` its bronze version (the covering run is the first, by
  `finished_at`, whose watermark reaches it; without it, the first that began planning after
  the commit), `pipeline_id` to pick one pipeline's rows from a log of several. None when no
  run covered it.
- `stages_table(breakdowns) -> str`: a Markdown table of the breakdown of the median and the
  p95 commit (nearest rank, by freshness) of `breakdowns`.

Example:
    >>> from datetime import UTC, datetime, timedelta
    >>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
    >>> def at(seconds: float) -> datetime:
    ...     return t0 + timedelta(seconds=seconds)
    >>> row = {
    ...     "pipeline_id": "orders", "outcome": "SUCCESS", "watermark_after": 7,
    ...     "created_at": at(2.5), "dequeued_at": at(3.5), "launched_at": at(4.0),
    ...     "started_at": at(4.6), "planned_at": at(5.0), "read_at": at(5.75),
    ...     "committed_at": at(7.0), "finished_at": at(7.25),
    ... }
    >>> account = commit_stages([row], t0, version=7)
    >>> account.seconds  # doctest: +NORMALIZE_WHITESPACE
    {'tick_wait': 2.5, 'queue': 1.0, 'launch': 0.5, 'plan': 1.0, 'read': 0.75,
     'merge': 1.25, 'end': 0.25}
    >>> account.total
    7.25
    >>> print(stages_table([account]).splitlines()[2])
    | tick wait: commit -> created | 2.50 | 2.50 |
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cdf_platform.state.load_log import STAGES, RunStages

# The outcomes of a run that leaves silver at its watermark (a FAILED row covers nothing).
_DONE = ("SUCCESS", "REPAIRED")
LABELS = {
    "tick_wait": "tick wait: commit -> created",
    "queue": "queue: created -> dequeued",
    "launch": "launch: dequeued -> launched",
    "plan": "planning: launched -> planned",
    "read": "read: planned -> change set read",
    "merge": "MERGE: read -> committed",
    "end": "end: committed -> finished",
}


@dataclass(frozen=True)
class CommitStages:
    """Where one commit's freshness went.

    Attributes:
        seconds: Seconds of each stage (`STAGES`' order; None: a stage the run has not).
        run_id: The load-log run that covered the commit.
    """

    seconds: dict[str, float | None]
    run_id: str | None = None

    @property
    def total(self) -> float:
        """The commit's freshness: the sum of its stages."""
        return sum(value for value in self.seconds.values() if value is not None)


def _instant(value: float | datetime) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromtimestamp(value, UTC)


def commit_stages(
    log: Sequence[Mapping[str, Any]],
    commit_at: float | datetime,
    *,
    version: int | None = None,
    pipeline_id: str | None = None,
) -> CommitStages | None:
    """The stages of the commit at `commit_at` (module doc); None when no run covered it."""
    committed = _instant(commit_at)
    done = sorted(
        (
            row
            for row in log
            if row["outcome"] in _DONE
            and row["watermark_after"] is not None
            and (pipeline_id is None or row["pipeline_id"] == pipeline_id)
        ),
        key=lambda row: row["finished_at"],
    )
    for row in done:
        covers = (
            row["watermark_after"] >= version
            if version is not None
            else row["started_at"] >= committed
        )
        if covers:
            seconds = RunStages.of_row(row).seconds(since=committed)
            return CommitStages(seconds, row.get("run_id"))
    return None


def _nearest_rank(ordered: Sequence[CommitStages], q: float) -> CommitStages:
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def stage_rows(breakdowns: Sequence[CommitStages]) -> list[dict[str, str]]:
    """The stages of the median and the p95 commit of `breakdowns` (by freshness, nearest
    rank), in seconds, a row per stage and the total last; "-" for a stage the commit's run
    has not; no rows when no commit was covered."""
    if not breakdowns:
        return []
    ordered = sorted(breakdowns, key=lambda account: account.total)
    median, p95 = _nearest_rank(ordered, 0.5), _nearest_rank(ordered, 0.95)
    rows = [
        {
            "stage": LABELS[stage],
            "median commit (s)": _cell(median.seconds.get(stage)),
            "p95 commit (s)": _cell(p95.seconds.get(stage)),
        }
        for stage, _mark in STAGES
    ]
    rows.append(
        {
            "stage": "**commit -> silver**",
            "median commit (s)": f"{median.total:.2f}",
            "p95 commit (s)": f"{p95.total:.2f}",
        }
    )
    return rows


def stages_of(log: Sequence[Mapping[str, Any]], commits: Sequence[Any]) -> list[dict[str, str]]:
    """`stage_rows` of `commits` (each with `at`, `version` and `pipeline_id`, as the
    benchmarks' writers record them) covered by the runs of the load-log rows `log`."""
    found = (
        commit_stages(log, c.at, version=c.version, pipeline_id=c.pipeline_id) for c in commits
    )
    return stage_rows([account for account in found if account is not None])


def stages_table(breakdowns: Sequence[CommitStages]) -> str:
    """`stage_rows` as a Markdown table."""
    rows = stage_rows(breakdowns)
    if not rows:
        return "No commit was covered by a run: no stage to show."
    lines = ["| stage | median commit (s) | p95 commit (s) |", "|---|---|---|"]
    lines.extend("| " + " | ".join(row.values()) + " |" for row in rows)
    return "\n".join(lines)
