"""Where a commit's freshness went, from hand-made load-log rows: the covering run is found as
the freshness benchmark finds it, its stages add up to the commit's freshness whatever marks
the run has, and the table shows the median and p95 commits."""

from __future__ import annotations

import doctest
from datetime import UTC, datetime, timedelta
from typing import Any

import bench.stages
from bench.stages import LABELS, CommitStages, commit_stages, stage_rows, stages_table
from cdf_platform.state.load_log import STAGES

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _row(run_id: str, watermark: int, start: float, **marks: float | None) -> dict[str, Any]:
    """A load-log row whose marks are seconds after T0 (a run of a deployment by default:
    created 1 s, dequeued 1.5 s, launched 2 s, started 2.5 s, then 1 s a stage)."""
    offsets: dict[str, float | None] = {
        "created_at": start,
        "dequeued_at": start + 0.5,
        "launched_at": start + 1.0,
        "started_at": start + 1.5,
        "planned_at": start + 2.0,
        "read_at": start + 3.0,
        "committed_at": start + 4.0,
        "finished_at": start + 4.5,
        **marks,
    }
    return {
        "run_id": run_id,
        "pipeline_id": "orders",
        "outcome": "SUCCESS",
        "watermark_after": watermark,
        **{name: None if value is None else at(value) for name, value in offsets.items()},
    }


def test_a_deployments_run_accounts_for_every_second_of_the_commit() -> None:
    account = commit_stages([_row("r1", 5, start=1.0)], T0, version=5)
    assert account is not None and account.run_id == "r1"
    assert account.seconds == {
        "tick_wait": 1.0,
        "queue": 0.5,
        "launch": 0.5,
        "plan": 1.0,  # launched -> planned: the run's start and its planning
        "read": 1.0,
        "merge": 1.0,
        "end": 0.5,
    }
    assert account.total == 5.5  # the commit -> the covering run's finished_at


def test_the_covering_run_is_the_first_to_reach_the_commits_version() -> None:
    log = [
        _row("behind", 4, start=0.5),
        {**_row("failed", 9, start=0.6), "outcome": "FAILED"},
        {**_row("other pipeline", 9, start=0.7), "pipeline_id": "customers"},
        _row("covering", 6, start=6.0),
        _row("later", 9, start=20.0),
    ]
    account = commit_stages(log, T0.timestamp(), version=5, pipeline_id="orders")
    assert account is not None and account.run_id == "covering"
    assert account.total == 10.5
    assert commit_stages(log, T0, version=10, pipeline_id="orders") is None
    # Without the version: the first run that began planning after the commit.
    account = commit_stages(log, at(3.0), pipeline_id="orders")
    assert account is not None and account.run_id == "covering"


def test_a_run_without_a_stage_gives_its_time_to_the_next() -> None:
    # An advance (no change set read) outside the queue.
    advance = _row("advance", 5, start=1.0, dequeued_at=None, read_at=None)
    account = commit_stages([advance], T0, version=5)
    assert account is not None
    assert (account.seconds["queue"], account.seconds["launch"]) == (None, 1.0)
    assert (account.seconds["read"], account.seconds["merge"]) == (None, 2.0)
    assert account.total == 5.5
    # A row of a log written before the marks: the run's start and its end only.
    old = {
        key: value
        for key, value in _row("old", 5, start=1.0).items()
        if key not in ("created_at", "dequeued_at", "launched_at", "planned_at", "read_at")
        and key != "committed_at"
    }
    account = commit_stages([old], T0, version=5)
    assert account is not None
    present = {stage: value for stage, value in account.seconds.items() if value is not None}
    assert present == {"launch": 2.5, "end": 3.0}
    assert account.total == 5.5


def test_the_table_shows_the_median_and_p95_commits() -> None:
    quick = CommitStages({"tick_wait": 1.0, "queue": None, "end": 2.0})
    slow = CommitStages({"tick_wait": 4.0, "queue": 0.5, "end": 9.0})
    table = stages_table([slow, quick, quick])
    lines = table.splitlines()
    assert lines[0] == "| stage | median commit (s) | p95 commit (s) |"
    assert "| tick wait: commit -> created | 1.00 | 4.00 |" in lines
    assert "| queue: created -> dequeued | - | 0.50 |" in lines
    assert lines[-1] == "| **commit -> silver** | 3.00 | 13.50 |"
    assert len(lines) == 2 + 7 + 1
    assert "no stage" in stages_table([])


def test_the_modules_example_runs() -> None:
    assert doctest.testmod(bench.stages).failed == 0


def test_the_benchmarks_report_rows_name_each_stage_and_the_total() -> None:
    quick = CommitStages({stage: 1.0 for stage, _ in STAGES})
    rows = stage_rows([quick])
    labels = [LABELS[stage] for stage, _ in STAGES]
    assert [row["stage"] for row in rows] == [*labels, "**commit -> silver**"]
    assert rows[-1]["median commit (s)"] == f"{len(STAGES):.2f}"
    assert stage_rows([]) == []
