"""One run in progress (`RunContext`: its ids, clock, timings and stage marks, and its Spark
session, started on first use) and what it did (`RunOutcome`), which `cdf_platform.run.record`
writes to the control tables and returns as the run's `RunResult`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.run_result import NO_ROWS, RowCounts
from cdf_platform.spark.runtime.session import assert_safe_spark_config, new_session
from cdf_platform.state.load_log import NOT_ORCHESTRATED, OrchestratorTimes, RunStages

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdf_platform.core.spec.expectations import ExpectationCounts
    from cdf_platform.core.spec.pipeline_spec import PipelineSpec
    from cdf_platform.state.control import ControlTable

SparkFactory = Callable[[], "SparkSession"]


class RunContext:
    """State of one run in progress: its id, start, timings, stage marks and Spark session.

    Spark starts on first use of `spark` (a no-op or an advance never starts it), in a session
    of its own: the txn confs set around the MERGE never leak to other work.

    Args:
        run_id: The run's id (default: a new one).
        started_at: When the run began planning (default: now).
        planned_at: When its plan was pinned.
        orchestrator: When an orchestrator created, dequeued and launched it.
    """

    def __init__(
        self,
        spec: PipelineSpec,
        spark_factory: SparkFactory,
        control: ControlTable,
        *,
        run_id: str | None = None,
        started_at: datetime | None = None,
        planned_at: datetime | None = None,
        orchestrator: OrchestratorTimes = NOT_ORCHESTRATED,
    ):
        self.spec = spec
        self.control = control
        self.run_id = run_id or uuid.uuid4().hex
        self.started_at = started_at or datetime.now(UTC)
        self.planned_at = planned_at
        # Marked by the kinds of write (change set read, silver's commit landed) and `record`.
        self.read_at: datetime | None = None
        self.committed_at: datetime | None = None
        self.finished_at: datetime | None = None
        self.orchestrator = orchestrator
        self.clock = time.monotonic()
        self.timings: dict[str, float] = {}
        self._spark_factory = spark_factory
        self._spark: SparkSession | None = None
        self._mark = self.clock

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            started = time.monotonic()
            self._spark = new_session(self._spark_factory())
            assert_safe_spark_config(self._spark)
            self.timings["spark_start"] = time.monotonic() - started
        return self._spark

    @property
    def spark_started(self) -> bool:
        return self._spark is not None

    def mark(self) -> None:
        """Start timing the next step here."""
        self._mark = time.monotonic()

    def stages(self) -> RunStages:
        """The run's marks so far (`finished`: its load-log row written, else now)."""
        return RunStages(
            self.started_at,
            self.planned_at,
            self.read_at,
            self.committed_at,
            self.finished_at or datetime.now(UTC),
            self.orchestrator,
        )

    def lap(self, name: str) -> None:
        """Add the time since the last mark or lap to step `name`, and mark now."""
        now = time.monotonic()
        self.timings[name] = self.timings.get(name, 0.0) + now - self._mark
        self._mark = now


@dataclass(frozen=True)
class RunOutcome:
    """What a run did, for its load-log row, its state row and its `RunResult`.

    Attributes:
        mode: What the run did.
        watermark_after: Silver's watermark after the run.
        counts: The rows its silver commit changed.
        start: The first bronze version it applied (an incremental run's), else None.
        end: The last bronze version it was to apply (None: a no-op).
        incident: The incident code it handled or noted.
        message: The load log's words on it.
        generation: The source generation a rebuild wrote (None: unchanged).
        expectations: Rows judged by the spec's expectations and failing each (None: none).
        reported: Whether `incident` and `message` are the result's too: a rebuild reports the
            problem it repaired; a run that took a spec edit forward only notes it in the load
            log, and its result carries no incident.
    """

    mode: RunMode
    watermark_after: int | None
    counts: RowCounts = NO_ROWS
    start: int | None = None
    end: int | None = None
    incident: str | None = None
    message: str | None = None
    generation: int | None = None
    reported: bool = False
    expectations: ExpectationCounts | None = None
