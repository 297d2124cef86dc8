"""The load log's rows (`LOG_SCHEMA`, `LoadLogEntry`: one per pipeline run) and the stages of a
run their timestamps mark (`RunStages`), so that where a bronze commit's seconds go on their way
to silver can be read back from the log.

A run's marks, in order (UTC; a mark the run does not pass is None):

- `created`, `dequeued`, `launched`: the orchestrator created the run, took it off its queue
  and handed it to the launcher, the run process started (Dagster's run record, its
  `RUN_STARTING` and `RUN_START` events; None for a run of the command line; a run executed
  in process has no `dequeued`);
- `started`: the run began planning (`PipelineRunner.prepare`); `planned`: its plan pinned;
- `read`: its change set read and collapsed (an incremental run's only);
- `committed`: silver's commit landed (none for a no-op, or a MERGE a newer run superseded);
- `finished`: its load-log row written.

Each stage (`STAGES`) lasts from the latest mark the run has before the one that ends it, so
the stages a run has add up to the time from its first mark to `finished`: every second is in
one stage. A run no orchestrator launched has `started` for its `launched`.

Example:
    >>> from datetime import UTC, datetime, timedelta
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> second = timedelta(seconds=1)
    >>> stages = RunStages(at, planned_at=at + second, finished_at=at + 3 * second)
    >>> stages.seconds()
    {'queue': None, 'launch': None, 'plan': 1.0, 'read': None, 'merge': None, 'end': 2.0}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# Column -> Delta type name (the names of the Delta protocol's schema serialization).
LOG_SCHEMA: dict[str, str] = {
    "run_id": "string",
    "pipeline_id": "string",
    "mode": "string",
    "outcome": "string",
    "incident_code": "string",
    "message": "string",
    "start_version": "long",
    "end_version": "long",
    "watermark_before": "long",
    "watermark_after": "long",
    "rows_inserted": "long",
    "rows_updated": "long",
    "rows_deleted": "long",
    "started_at": "timestamp",
    "finished_at": "timestamp",
    "plan_seconds": "double",
    "read_seconds": "double",
    "write_seconds": "double",
    "duration_seconds": "double",
    # The spec the run wrote under: its fingerprint and its row-shaping fields (JSON).
    "spec_fingerprint": "string",
    "spec": "string",
    # The run's expectation counts (JSON: rows judged, failing rows per rule).
    "expectations": "string",
    # The run's marks besides started and finished (module doc); a log written before they
    # were added takes them on its next append, its earlier rows null.
    "created_at": "timestamp",
    "dequeued_at": "timestamp",
    "launched_at": "timestamp",
    "planned_at": "timestamp",
    "read_at": "timestamp",
    "committed_at": "timestamp",
}
# Each stage of a run, with the mark that ends it (it starts at the latest mark the run has
# before that one); `tick_wait` starts at a bronze commit, so only a commit's account has it.
STAGES: tuple[tuple[str, str], ...] = (
    ("tick_wait", "created"),
    ("queue", "dequeued"),
    ("launch", "launched"),
    ("plan", "planned"),
    ("read", "read"),
    ("merge", "committed"),
    ("end", "finished"),
)


@dataclass(frozen=True)
class OrchestratorTimes:
    """When the orchestrator created, dequeued and launched a run (UTC; None: not launched by
    one, or not through its queue). The run package takes them as plain times, so it stays
    free of Dagster."""

    created_at: datetime | None = None
    dequeued_at: datetime | None = None
    launched_at: datetime | None = None


NOT_ORCHESTRATED = OrchestratorTimes()


@dataclass(frozen=True)
class RunStages:
    """The marks of one run (module doc), and the seconds of its stages."""

    started_at: datetime
    planned_at: datetime | None = None
    read_at: datetime | None = None
    committed_at: datetime | None = None
    finished_at: datetime | None = None
    orchestrator: OrchestratorTimes = NOT_ORCHESTRATED

    @classmethod
    def of_row(cls, row: Mapping[str, Any]) -> RunStages:
        """The marks of a load-log row (a column the row lacks: None)."""
        return cls(
            started_at=row["started_at"],
            planned_at=row.get("planned_at"),
            read_at=row.get("read_at"),
            committed_at=row.get("committed_at"),
            finished_at=row.get("finished_at"),
            orchestrator=OrchestratorTimes(
                row.get("created_at"), row.get("dequeued_at"), row.get("launched_at")
            ),
        )

    def marks(self) -> dict[str, datetime | None]:
        """Each mark's time; `launched` is `started` for a run no orchestrator launched."""
        orchestrator = self.orchestrator
        return {
            "created": orchestrator.created_at,
            "dequeued": orchestrator.dequeued_at,
            "launched": orchestrator.launched_at or self.started_at,
            "planned": self.planned_at,
            "read": self.read_at,
            "committed": self.committed_at,
            "finished": self.finished_at,
        }

    def seconds(self, since: datetime | None = None) -> dict[str, float | None]:
        """Seconds of each stage (None: a stage the run does not have), from `since` (a bronze
        commit: `tick_wait` is the wait for the run's creation) or else from the run's first
        mark."""
        marks = self.marks()
        previous = since
        figures: dict[str, float | None] = {}
        for stage, mark in STAGES:
            at = marks[mark]
            if since is None and stage == "tick_wait":
                previous = at
                continue
            figures[stage] = (
                None if at is None or previous is None else (at - previous).total_seconds()
            )
            previous = at or previous
        return figures

    def columns(self) -> dict[str, datetime | None]:
        """The load log's mark columns besides `started_at` and `finished_at`."""
        orchestrator = self.orchestrator
        return {
            "created_at": orchestrator.created_at,
            "dequeued_at": orchestrator.dequeued_at,
            "launched_at": orchestrator.launched_at,
            "planned_at": self.planned_at,
            "read_at": self.read_at,
            "committed_at": self.committed_at,
        }


@dataclass(frozen=True)
class LoadLogEntry:
    """One row of the load log."""

    run_id: str
    pipeline_id: str
    mode: str
    outcome: str
    started_at: datetime
    finished_at: datetime
    incident_code: str | None = None
    message: str | None = None
    start_version: int | None = None
    end_version: int | None = None
    watermark_before: int | None = None
    watermark_after: int | None = None
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    plan_seconds: float = 0.0
    read_seconds: float = 0.0
    write_seconds: float = 0.0
    spec_fingerprint: str | None = None
    spec: str | None = None
    expectations: str | None = None
    # The run's other marks (None: none recorded; `started_at` and `finished_at` are above).
    stages: RunStages | None = None

    @property
    def duration_seconds(self) -> float:
        """Wall time of the run, from its planning's start."""
        return (self.finished_at - self.started_at).total_seconds()

    def as_row(self) -> dict[str, Any]:
        """The row as written to the load log."""
        marks = self.stages.columns() if self.stages is not None else {}
        row = {name: getattr(self, name, None) for name in LOG_SCHEMA}
        return {**row, **marks, "duration_seconds": self.duration_seconds}
