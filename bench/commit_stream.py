"""A stream of bronze commits that can be played again: the plan (when, which table) drawn
from a seed, a writer thread that plays a plan and records what it did, and the record played
into fresh tables for a second consumer.

The first pass plays `plan_commits(...)` and records each commit's actual offset from the
writer's start; the second plays that record, so both consumers see the same tables, the same
batches (each kind's batches are deterministic given the table's history) at the same times.

Example:
    >>> plan = plan_commits(["a", "b"], interval=1.0, minutes=0.05, seed=3)
    >>> [(c.offset, c.pipeline_id) for c in plan]
    [(0.0, 'a'), (1.0, 'a'), (2.0, 'b')]
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from cdf_platform_testkit.deployment import Commit


@dataclass(frozen=True)
class PlannedCommit:
    """One commit of a stream: `offset` seconds after the writer starts, to `pipeline_id`."""

    offset: float
    pipeline_id: str


def plan_commits(
    pipeline_ids: Sequence[str], *, interval: float, minutes: float, seed: int
) -> list[PlannedCommit]:
    """A commit every `interval` seconds for `minutes`, each to a table drawn (seeded) from
    `pipeline_ids`."""
    draw = random.Random(seed)
    count = max(1, int(minutes * 60 / interval))
    return [
        PlannedCommit(round(k * interval, 3), draw.choice(list(pipeline_ids))) for k in range(count)
    ]


def save_stream(path: Path, stream: Sequence[PlannedCommit]) -> Path:
    """Write `stream` as JSON to `path`; return `path`."""
    path.write_text(json.dumps([asdict(c) for c in stream]) + "\n")
    return path


def load_stream(path: Path) -> list[PlannedCommit]:
    """A stream written by `save_stream`."""
    return [
        PlannedCommit(float(c["offset"]), str(c["pipeline_id"]))
        for c in json.loads(path.read_text())
    ]


class StreamWriter:
    """A thread committing `stream` through `write` (pipeline id -> the commit's version), each
    commit at its offset from `start()` (or at once when the writer is behind), until the stream
    ends or `stop()`.

    Attributes:
        commits: Every commit made (pipeline, version, when it returned).
        played: The stream as played: each commit's offset when it started.
    """

    def __init__(self, stream: Sequence[PlannedCommit], write: Callable[[str], int]) -> None:
        self.stream, self.write = list(stream), write
        self.commits: list[Commit] = []
        self.played: list[PlannedCommit] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="stream-writer", daemon=True)

    def _play(self) -> None:
        started = time.monotonic()
        for planned in self.stream:
            if self._stop.wait(max(0.0, started + planned.offset - time.monotonic())):
                return
            offset = round(time.monotonic() - started, 3)
            version = self.write(planned.pipeline_id)
            self.commits.append(Commit(planned.pipeline_id, version, time.time()))
            self.played.append(PlannedCommit(offset, planned.pipeline_id))

    def start(self) -> StreamWriter:
        self._thread.start()
        return self

    def done(self) -> bool:
        """Whether the whole stream was played (or the writer stopped)."""
        return not self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
