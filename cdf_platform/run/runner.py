"""`PipelineRunner`: the one way a pipeline run is carried out, by the command line, the silver
asset, the tests and the benchmarks. It plans and pins the run (`prepare`, JVM-free unless a
table is named in the catalog), then carries it out (`finish`): no-op, advance, incremental,
initial load, snapshot or rebuild, each failure classified as a platform error naming the
pipeline. What a problem the run meets leads to is asked of `repair_decision`; what a
requested rebuild does (refused on FAIL_FAST without a person's decision, skipped when its
loss was repaired, the audit record of an override) of `requested_rebuild`, for every entry
alike (`RunEntry`: who asks).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.planning.plan import RunMode, RunPlan, plan_pipeline
from cdf_platform.planning.repair import repair_decision
from cdf_platform.planning.run_result import RunResult
from cdf_platform.run.advance import run_advance
from cdf_platform.run.context import RunContext, RunOutcome, SparkFactory
from cdf_platform.run.incremental import run_incremental
from cdf_platform.run.jvm_free.incremental_run import run_jvm_free_incremental
from cdf_platform.run.rebuild_policy import (
    IN_PROCESS,
    NOT_REQUESTED,
    Log,
    RunEntry,
    requested_rebuild,
)
from cdf_platform.run.record import record_incident, repair_control, result
from cdf_platform.run.snapshot import run_snapshot
from cdf_platform.run.strategy import WriteStrategy
from cdf_platform.spark.runtime.failures import classified_run
from cdf_platform.spark.table.catalog import locate_in_catalog, register_silver
from cdf_platform.state.load_log import NOT_ORCHESTRATED, OrchestratorTimes

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdf_platform.core.spec.pipeline_spec import PipelineSpec
    from cdf_platform.state.control import ControlTable

logger = logging.getLogger(__name__)

SessionFor = Callable[[bool], "SparkSession"]
"""The SparkSession a run uses, given whether the run is short (`PreparedRun.is_short`): a
driver JVM that a short run starts may start lean (`SparkSettings.short_run`)."""


@dataclass(frozen=True)
class PreparedRun:
    """A pipeline run planned and pinned, not yet carried out (`PipelineRunner.prepare`;
    `PipelineRunner.finish` carries it out).

    Attributes:
        spec: The pipeline as declared (catalog names kept, to register silver under its name).
        plan: The pinned plan; its spec names the tables' locations.
        plan_seconds: How long locating and planning took.
        started_at: When planning began (None: when the run is carried out).
        planned_at: When the plan was pinned.
    """

    spec: PipelineSpec
    plan: RunPlan
    plan_seconds: float = 0.0
    started_at: datetime | None = None
    planned_at: datetime | None = None

    def is_short(self, *, force_rebuild: bool = False) -> bool:
        """Whether carrying this out is a short run: a small incremental one
        (`RunPlan.is_small_incremental`), not a forced rebuild. A driver JVM that such a run
        starts can start lean (`SparkSettings.short_run`)."""
        return not force_rebuild and self.plan.is_small_incremental()


def _run_command(spec: PipelineSpec) -> str:
    return f"`cdf-platform run {spec.id}`"


@dataclass(frozen=True)
class PipelineRunner:
    """The one way a pipeline run is carried out (module doc).

    The silver asset calls the two halves apart (its IO manager's load plans, its output
    writes); `run` calls both.

    Attributes:
        control: The control tables (state and load log).
        session_for: The session a run uses, given whether the run is short.
        rerun: How to run a pipeline again, for an unexpected failure's action.
        entry: Who asks for the runs (`RunEntry`: the CLI, the silver asset; default a direct
            call): whether a rebuild may override FAIL_FAST, and what its audit record names.
        log: Where the run's policy decisions are told (an orchestrator's run log).

    Example:
        >>> runner = PipelineRunner(control, lambda short: spark)  # doctest: +SKIP
        >>> runner.run(spec).mode  # doctest: +SKIP
        <RunMode.INCREMENTAL: 'incremental'>
    """

    control: ControlTable
    session_for: SessionFor
    rerun: Callable[[PipelineSpec], str] = _run_command
    entry: RunEntry = IN_PROCESS
    log: Log = logger

    @classmethod
    def on(cls, control: ControlTable, spark_factory: SparkFactory) -> PipelineRunner:
        """A runner whose every run uses the session `spark_factory` gives, short or not."""
        return cls(control, lambda _short: spark_factory())

    def prepare(self, spec: PipelineSpec, *, now: datetime | None = None) -> PreparedRun:
        """Plan `spec`'s next run from the logs and pin its change set.

        A pipeline that names a table by its catalog name starts Spark to ask the catalog where
        it lives now (the plan reads the logs there); a pipeline of paths plans without a JVM.

        Raises:
            CdfPlatformError: a problem a person must fix (bronze missing, a name not in the
                catalog, a target owned by another pipeline, ...).
        """
        with classified_run(spec.id, rerun=self.rerun(spec)):
            started_at, started = datetime.now(UTC), time.monotonic()
            if spec.table_names:
                locate_in_catalog(self.session_for(False), spec, self.control)
            plan = plan_pipeline(spec, self.control, now=now)
            seconds = time.monotonic() - started
            return PreparedRun(spec, plan, seconds, started_at, datetime.now(UTC))

    def finish(
        self,
        prepared: PreparedRun,
        *,
        force_rebuild: bool = False,
        repair_of: int | None = None,
        shares_jvm: bool = False,
        orchestrator: OrchestratorTimes = NOT_ORCHESTRATED,
    ) -> RunResult:
        """Carry out a prepared run, then register silver under its catalog name once it
        exists, when the pipeline names its target so. Its session is asked for as short when
        the run is short and `shares_jvm` is false (no other run shares this process's JVM).

        `force_rebuild` reconciles from the snapshot at the plan's end version whatever the
        state, as `requested_rebuild` decides for this runner's entry (`repair_of`: the
        watermark of the loss it was asked to repair, if any). `orchestrator`: when the
        orchestrator created, dequeued and launched the run, for its load-log row and its
        result's stages.

        Raises:
            RebuildNeedsOverride: a rebuild of a FAIL_FAST pipeline its entry may not override.
            CdfPlatformError: the classified failure (FAIL_FAST, bad input, a read failure).
        """
        run_id = uuid.uuid4().hex
        with classified_run(prepared.spec.id, rerun=self.rerun(prepared.spec)):
            rebuild = NOT_REQUESTED
            if force_rebuild:
                rebuild = requested_rebuild(
                    self.entry,
                    self.control,
                    prepared.spec.target,
                    prepared.plan,
                    run_id=run_id,
                    repair_of=repair_of,
                    log=self.log,
                )
            short = not shares_jvm and prepared.is_short(force_rebuild=rebuild.runs)

            def session() -> SparkSession:
                return self.session_for(short)

            run = RunContext(
                prepared.plan.spec,
                session,
                self.control,
                run_id=run_id,
                started_at=prepared.started_at,
                planned_at=prepared.planned_at,
                orchestrator=orchestrator,
            )
            run.timings["plan"] = prepared.plan_seconds
            repair_control(run, prepared.plan)
            outcome = _carry_out(run, prepared.plan, force_rebuild=rebuild.runs)
            run_result = replace(
                result(run, prepared.plan, outcome), overridden_by=rebuild.overridden_by
            )
            if "target" in prepared.spec.table_names:
                register_silver(
                    session(),
                    prepared.spec.target,
                    prepared.plan.spec.target,
                    self.control,
                    prepared.spec.id,
                    created=not prepared.plan.silver.exists,
                )
            return run_result

    def run(
        self,
        spec: PipelineSpec,
        *,
        now: datetime | None = None,
        force_rebuild: bool = False,
        on_plan: Callable[[RunPlan], None] | None = None,
    ) -> RunResult:
        """Plan and run `spec` once: no-op, initial load, incremental, snapshot or rebuild per the
        fallback policy.

        Args:
            on_plan: called with the plan before it is carried out (to log the change set).

        Raises:
            CdfPlatformError: the classified failure (FAIL_FAST, bad input, a read failure).
        """
        prepared = self.prepare(spec, now=now)
        if on_plan is not None:
            on_plan(prepared.plan)
        return self.finish(prepared, force_rebuild=force_rebuild)

    def repair(self, plan: RunPlan, version: int, *, run_id: str | None = None) -> RunResult:
        """Reconcile silver with bronze's snapshot at `version` (not below the watermark of
        `plan`, the pipeline's pinned plan): a verification's repair, the rebuild's quiet
        reconcile stamped at `version` (`RunMode.VERIFY_REPAIR`), with its load-log and state
        rows like every run's. `run_id`: the run's id (default: a new one).

        Raises:
            CdfPlatformError: the classified failure (its FAILED row written).
        """
        spec = plan.spec
        repair = replace(
            plan, mode=RunMode.VERIFY_REPAIR, start_version=None, end_version=version, problem=None
        )
        with classified_run(spec.id, rerun=self.rerun(spec)):
            run = RunContext(spec, lambda: self.session_for(False), self.control, run_id=run_id)
            repair_control(run, repair)
            strategy = WriteStrategy.of(spec, self.control)
            outcome = run_snapshot(run, repair, strategy, None, requested=False)
            return result(run, repair, outcome)


def _carry_out(run: RunContext, plan: RunPlan, *, force_rebuild: bool) -> RunOutcome:
    """No-op, advance, incremental, initial load, snapshot or rebuild, per the plan and the
    fallback policy.

    A no-op (no bronze version after the watermark) never starts Spark. A problem that a
    rebuild repairs (lost window, source reset, incompatible schema change, CDF gap) runs the
    rebuild when `repair_decision` says so and raises otherwise; either way the incident is
    written to the load log. Nothing is written to silver before the problem is known.
    """
    strategy = WriteStrategy.of(plan.spec, run.control)
    if force_rebuild:
        return run_snapshot(run, plan, strategy, plan.problem, requested=True)
    if plan.mode is RunMode.NOOP:
        return RunOutcome(RunMode.NOOP, plan.silver.watermark)
    if plan.problem is not None:
        _repair_or_raise(run, plan, plan.problem)
        return run_snapshot(run, plan, strategy, plan.problem, requested=False)
    if plan.mode.reads_snapshot:  # an initial load or a snapshot source's run: no problem here
        return run_snapshot(run, plan, strategy, None, requested=False)
    if plan.mode is RunMode.ADVANCE:
        advanced = run_advance(run, plan)
        if advanced is not None:
            return advanced
    try:
        # A small SCD1 change set deltalake applies exactly needs no Spark (None: Spark's run).
        jvm_free = run_jvm_free_incremental(run, plan)
        if jvm_free is not None:
            return jvm_free
        return run_incremental(run, plan, strategy)
    except CdfPlatformError as err:
        # The read itself re-checks the window: a failure classified as a lost window is handled
        # exactly like one found by the plan.
        _repair_or_raise(run, plan, err)
        return run_snapshot(run, plan, strategy, err, requested=False)


def _repair_or_raise(run: RunContext, plan: RunPlan, problem: CdfPlatformError) -> None:
    """Return when a rebuild repairs `problem` now; else write its incident and raise it."""
    spec = plan.spec
    # A snapshot source's rebuild is its every run: it needs no change feed.
    change_feed_on = plan.window.cdf_enabled_at_latest or not spec.changes.replays_history
    if not repair_decision(spec.fallback_mode, problem, change_feed_on=change_feed_on).automatic:
        record_incident(run, plan, problem)
        raise problem
