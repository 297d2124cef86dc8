"""Running a pipeline: plan (JVM-free), then incremental, initial load, rebuild or nothing, with
the fallback policy, the control table and the load log.

Example:
    >>> result = run_pipeline(spec, spark_factory=lambda: spark, control=ControlTable(root))
    ... # doctest: +SKIP
    >>> result.mode, result.end_version  # doctest: +SKIP
    (<RunMode.INCREMENTAL: 'incremental'>, 57)
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING

from cdf_platform.core.errors import CdfPlatformError, SourceReset, SpecChanged
from cdf_platform.core.faults import FaultPoint, fault_point
from cdf_platform.core.spec import ChangeSource, FallbackMode, HistoryMode, PipelineSpec
from cdf_platform.core.spec_fingerprint import EXACT_FIELDS, fingerprint_of, shaping_fields
from cdf_platform.planning.assessment import REBUILDABLE
from cdf_platform.planning.plan import RunMode, RunPlan, plan_pipeline
from cdf_platform.planning.run_result import RunResult
from cdf_platform.spark.catalog import locate_in_catalog, register_silver
from cdf_platform.spark.changes import (
    FEED_COLUMNS,
    ChangeOrder,
    ReadContext,
    classified,
    collapse_changes,
    read_changes,
)
from cdf_platform.spark.events import Tombstones, change_rows, fold_events
from cdf_platform.spark.failures import classified_run
from cdf_platform.spark.history import rebuild_note
from cdf_platform.spark.merge import changes_key_filter
from cdf_platform.spark.metrics import commit_counts, find_run_commit, silver_commit_counts
from cdf_platform.spark.rebuild import RebuildRequest, SpecRewrite, rebuild_silver
from cdf_platform.spark.session import assert_safe_spark_config, new_session
from cdf_platform.spark.silver_layout import SilverLayout
from cdf_platform.spark.silver_table import ensure_silver, silver_widenings
from cdf_platform.spark.silver_writer import SilverWriter, silver_stamp
from cdf_platform.spark.small_steps import (
    copy_on_write_merge,
    fixed_plan,
    interpreted,
    interpreted_merge,
    load_table_state,
    loading_table_state,
)
from cdf_platform.state.control import ControlTable, LoadLogEntry
from cdf_platform.state.watermark import advance_watermark, read_silver_state, spec_metadata
from cdf_platform.window.replay_window import assess_consumer, compute_replay_window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

SparkFactory = Callable[[], "SparkSession"]
# The timed steps of an incremental run's silver write (the load log's `write_seconds` is their
# sum); the run's other steps: plan, spark_start, read, commit_counts, control, lag_after.
WRITE_STEPS = ("silver_check", "silver_state", "key_filter", "merge")
# The load log's incident code of a run that took a spec edit forward only.
SPEC_FORWARD_ONLY = "SPEC_FORWARD_ONLY"


class _Run:
    """State of one run in progress (Spark started lazily, timings, ids)."""

    def __init__(self, spec: PipelineSpec, spark_factory: SparkFactory, control: ControlTable):
        self.spec = spec
        self.control = control
        self.run_id = uuid.uuid4().hex
        self.started_at = datetime.now(UTC)
        self.clock = time.monotonic()
        self.timings: dict[str, float] = {}
        self._spark_factory = spark_factory
        self._spark: SparkSession | None = None

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            started = time.monotonic()
            # A session of its own: the txn confs set around the MERGE never leak to other work.
            self._spark = new_session(self._spark_factory())
            assert_safe_spark_config(self._spark)
            self.timings["spark_start"] = time.monotonic() - started
        return self._spark

    @property
    def spark_started(self) -> bool:
        return self._spark is not None

    def lap(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.timings[name] = self.timings.get(name, 0.0) + now - since
        return now


def _repair_control(run: _Run, plan: RunPlan) -> None:
    """Bring the control tables to silver's watermark when they lag it: a run whose process
    ended after its silver commit (killed, or its Spark work finished on an engine after it
    died) never recorded it. The load log gets a REPAIRED row for that commit, so every silver
    commit has its row and each row starts where the one before ended."""
    watermark = plan.silver.watermark
    state = run.control.read_states().get(plan.spec.id)
    recorded = state.get("last_commit_version") if state is not None else None
    if watermark is None or (state is not None and recorded == watermark):
        return
    last = plan.silver.last_run or {}
    note = (
        f"silver's log holds bronze versions up to {watermark} (run {last.get('run_id')}, "
        f"{last.get('mode')}) that the control tables did not record: that run ended after its "
        "silver commit"
    )
    _write_control(
        run, plan, RunMode.NOOP, watermark, None, (0, 0, 0), before=recorded, message=note
    )


@dataclass(frozen=True)
class PreparedRun:
    """A pipeline run planned and pinned, not yet carried out (the first half of
    `run_pipeline`; `finish_run` is the second).

    Attributes:
        spec: The pipeline as declared (catalog names kept, to register silver under its name).
        plan: The pinned plan; its spec names the tables' locations.
        plan_seconds: How long locating and planning took.
    """

    spec: PipelineSpec
    plan: RunPlan
    plan_seconds: float

    def is_short(self, *, force_rebuild: bool = False) -> bool:
        """Whether carrying this out is a short run: a small incremental one
        (`RunPlan.is_small_incremental`), not a forced rebuild. A driver JVM that such a run
        starts can start lean (`SparkSettings.short_run`)."""
        return not force_rebuild and self.plan.is_small_incremental()


def prepare_run(
    spec: PipelineSpec,
    *,
    spark_factory: SparkFactory,
    control: ControlTable,
    now: datetime | None = None,
) -> PreparedRun:
    """Plan `spec`'s next run from the logs and pin its change set.

    A pipeline that names a table by its catalog name starts Spark to ask the catalog where it
    lives now (the plan reads the logs there); a pipeline of paths plans without a JVM.

    Raises:
        CdfPlatformError: a problem a person must fix (bronze missing, a name not in the
            catalog, a target owned by another pipeline, ...).
    """
    started = time.monotonic()
    if spec.table_names:
        locate_in_catalog(spark_factory(), spec, control)
    plan = plan_pipeline(spec, control, now=now)
    return PreparedRun(spec, plan, time.monotonic() - started)


def finish_run(
    prepared: PreparedRun,
    *,
    spark_factory: SparkFactory,
    control: ControlTable,
    force_rebuild: bool = False,
) -> RunResult:
    """Carry out a prepared run (`execute_plan`), then register silver under its catalog name
    once it exists, when the pipeline names its target so.

    Raises:
        CdfPlatformError: the classified failure (FAIL_FAST, bad input, or a read failure).
    """
    result = execute_plan(
        prepared.plan,
        spark_factory=spark_factory,
        control=control,
        force_rebuild=force_rebuild,
        plan_seconds=prepared.plan_seconds,
    )
    if "target" in prepared.spec.table_names:
        register_silver(
            spark_factory(),
            prepared.spec.target,
            prepared.plan.spec.target,
            control,
            prepared.spec.id,
            created=not prepared.plan.silver.exists,
        )
    return result


SessionFor = Callable[[bool], "SparkSession"]
"""The SparkSession a run uses, given whether the run is short (`PreparedRun.is_short`): a
driver JVM that a short run starts may start lean (`SparkSettings.short_run`)."""


def _run_command(spec: PipelineSpec) -> str:
    return f"`cdf-platform run {spec.id}`"


@dataclass(frozen=True)
class PipelineRunner:
    """The one way a pipeline run is carried out, by the command line, the silver asset and the
    tests: planned and pinned (`prepare`), then carried out (`finish`), any failure classified
    as a platform error naming the pipeline (`cdf_platform.spark.failures.classified_run`).

    The silver asset calls the two halves apart (its IO manager's load plans, its output
    writes); `run` calls both.

    Attributes:
        control: The control tables (state and load log).
        session_for: The session a run uses, given whether the run is short.
        rerun: How to run a pipeline again, for an unexpected failure's action.

    Example:
        >>> runner = PipelineRunner(control, lambda short: spark)  # doctest: +SKIP
        >>> runner.run(spec).mode  # doctest: +SKIP
        <RunMode.INCREMENTAL: 'incremental'>
    """

    control: ControlTable
    session_for: SessionFor
    rerun: Callable[[PipelineSpec], str] = _run_command

    def prepare(self, spec: PipelineSpec, *, now: datetime | None = None) -> PreparedRun:
        """Plan `spec`'s next run and pin it (`prepare_run`).

        Raises:
            CdfPlatformError: a problem a person must fix (bronze missing, ...).
        """
        with classified_run(spec.id, rerun=self.rerun(spec)):
            return prepare_run(
                spec, spark_factory=lambda: self.session_for(False), control=self.control, now=now
            )

    def finish(
        self, prepared: PreparedRun, *, force_rebuild: bool = False, shares_jvm: bool = False
    ) -> RunResult:
        """Carry out a prepared run (`finish_run`); its session is asked for as short when the
        run is short and `shares_jvm` is false (no other run shares this process's JVM).

        Raises:
            CdfPlatformError: the classified failure (FAIL_FAST, bad input, a read failure).
        """
        short = not shares_jvm and prepared.is_short(force_rebuild=force_rebuild)
        with classified_run(prepared.spec.id, rerun=self.rerun(prepared.spec)):
            return finish_run(
                prepared,
                spark_factory=lambda: self.session_for(short),
                control=self.control,
                force_rebuild=force_rebuild,
            )

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


def run_pipeline(
    spec: PipelineSpec,
    *,
    spark_factory: SparkFactory,
    control: ControlTable,
    now: datetime | None = None,
    force_rebuild: bool = False,
    on_plan: Callable[[RunPlan], None] | None = None,
) -> RunResult:
    """`PipelineRunner.run` on the session `spark_factory` gives, short run or not.

    Raises:
        CdfPlatformError: the classified failure (FAIL_FAST, bad input, or a read failure).
    """
    runner = PipelineRunner(control, lambda _short: spark_factory())
    return runner.run(spec, now=now, force_rebuild=force_rebuild, on_plan=on_plan)


def execute_plan(
    plan: RunPlan,
    *,
    spark_factory: SparkFactory,
    control: ControlTable,
    force_rebuild: bool = False,
    plan_seconds: float = 0.0,
) -> RunResult:
    """Carry out `plan`: no-op, initial load, incremental, snapshot or rebuild per the fallback
    policy.

    A no-op (no bronze version after the watermark) never starts Spark. A problem that a
    rebuild repairs (lost window, source reset, incompatible schema change, CDF gap) runs the
    rebuild under `SNAPSHOT_REBUILD` and raises under `FAIL_FAST`; either way the incident is
    written to the load log. Nothing is written to silver before the problem is known.
    `force_rebuild` reconciles from the snapshot at the plan's end version whatever the state.

    Raises:
        CdfPlatformError: the classified failure (FAIL_FAST, bad input, or a read failure).
    """
    spec = plan.spec
    run = _Run(spec, spark_factory, control)
    run.timings["plan"] = plan_seconds
    _repair_control(run, plan)
    if force_rebuild:
        return _rebuild(run, plan, plan.problem, requested=True)
    if plan.mode is RunMode.NOOP:
        return _result(run, plan, RunMode.NOOP, None, None, plan.silver.watermark, (0, 0, 0))
    if plan.problem is not None:
        rebuildable = _rebuildable(plan, plan.problem)
        if spec.fallback_mode is FallbackMode.FAIL_FAST or not rebuildable:
            _log_incident(run, plan, plan.problem)
            raise plan.problem
        return _rebuild(run, plan, plan.problem, requested=False)
    if plan.mode.reads_snapshot:  # an initial load or a snapshot source's run: no problem here
        return _rebuild(run, plan, None, requested=False)
    if plan.mode is RunMode.ADVANCE:
        result = _advance(run, plan)
        if result is not None:
            return result
    try:
        return _incremental(run, plan)
    except CdfPlatformError as err:
        # The read itself re-checks the window: a failure classified as a lost window is handled
        # exactly like one found by the plan.
        rebuildable = _rebuildable(plan, err)
        if spec.fallback_mode is FallbackMode.SNAPSHOT_REBUILD and rebuildable:
            return _rebuild(run, plan, err, requested=False)
        _log_incident(run, plan, err)
        raise


def _rebuildable(plan: RunPlan, problem: CdfPlatformError) -> bool:
    """Whether a snapshot rebuild repairs `problem`: a spec edit always (it reads no change
    feed), a lost window when bronze's change feed is on again."""
    if isinstance(problem, SpecChanged):
        return True
    if not isinstance(problem, REBUILDABLE):
        return False
    # A snapshot source's rebuild is its every run: it needs no change feed.
    return plan.window.cdf_enabled_at_latest or plan.spec.snapshot_source


def _spec_rewrite(plan: RunPlan) -> SpecRewrite:
    """How a rebuild of `plan` follows the spec edits silver has not taken (or took forward
    only): reshape for keys, history or delete mode, exact values where a value-keeping rule
    changed, deletion vectors set when that field changed."""
    change, fields = plan.spec_change, set(plan.spec_edits)
    return SpecRewrite(
        record=plan.spec_record,
        reshape=change is not None and change.reshapes,
        exact=bool(fields & EXACT_FIELDS),
        deletion_vectors=plan.spec.deletion_vectors if "deletion_vectors" in fields else None,
    )


def _spec_note(plan: RunPlan, *, rebuilt: bool) -> str | None:
    """The load log's words on a spec edit this run took, if any: reconciled or reshaped by a
    rebuild, or taken forward only by an incremental run."""
    change, held = plan.spec_change, plan.forward_only
    if rebuilt and plan.spec_edits:
        how = (
            "rewrote silver in the new shape" if change and change.reshapes else "reconciled silver"
        )
        since = change.recorded if change is not None else held.from_fingerprint if held else None
        return (
            f"spec edit of {', '.join(plan.spec_edits)}: {how} from the bronze snapshot at version "
            f"{plan.end_version} (spec fingerprint {since} -> {plan.spec_fingerprint})"
        )
    if not rebuilt and change is not None:
        return (
            f"{change.describe()}; taken forward only (`on_spec_change: forward_only`): rows "
            f"applied up to bronze version {plan.watermark} keep the previous spec's values "
            "until the next rebuild"
        )
    return None


def _advance(run: _Run, plan: RunPlan) -> RunResult | None:
    """The range changes no row: advance the watermark to its end in a silver commit of no data
    written without Spark, stamped as an incremental commit is. None when silver's protocol
    needs Spark to write it (the caller runs the range as an incremental run instead)."""
    spec = plan.spec
    assert plan.start_version is not None
    start, end = plan.start_version, plan.end_version
    since = time.monotonic()
    stamp = silver_stamp(
        spec.id,
        generation=plan.silver.generation,
        run_id=run.run_id,
        mode=RunMode.ADVANCE.value,
        start_version=start,
        end_version=end,
        source_table_id=plan.window.table_id,
        **spec_metadata(plan.spec_record, plan.forward_only_after()),
    )
    advanced = advance_watermark(spec.target, stamp.app_id, stamp.version, stamp.metadata)
    if advanced is None:
        logger.info(
            "%s: silver's protocol needs Spark to write; bronze versions %d..%d (no row "
            "changed) run as an incremental run",
            spec.id,
            start,
            end,
        )
        return None
    run.lap("write", since)
    applied = end if advanced else read_silver_state(spec.target, spec.id).watermark
    if not advanced:
        logger.warning(
            "%s: a newer run already applied up to %s; nothing written", spec.id, applied
        )
    note = _spec_note(plan, rebuilt=False)
    incident = SPEC_FORWARD_ONLY if note is not None and advanced else None
    _write_control(
        run, plan, RunMode.ADVANCE, applied, incident, (0, 0, 0), start=start, message=note
    )
    return _result(run, plan, RunMode.ADVANCE, start, end, applied, (0, 0, 0))


def _incremental(run: _Run, plan: RunPlan) -> RunResult:
    # A small change set runs on a fixed plan (`cdf_platform.spark.small_steps`).
    with fixed_plan(run.spark, plan.change_bytes()):
        return _incremental_steps(run, plan)


def _incremental_steps(run: _Run, plan: RunPlan) -> RunResult:
    spec = plan.spec
    assert plan.start_version is not None
    start, end = plan.start_version, plan.end_version
    ctx = ReadContext(spec.id, spec.source, start, end)
    spark = run.spark
    since = time.monotonic()
    raw = read_changes(spark, spec.source, start, end, pipeline_id=spec.id)
    changes, truncation = change_rows(spark, raw, spec, ctx)
    data_columns = [c for c in changes.columns if c not in FEED_COLUMNS]
    # The change set and silver's log state are small: built without generated code, and
    # silver's state (which the MERGE reuses) on a second thread while the changes are read.
    with interpreted(spark):
        with loading_table_state(spark, spec.target) as state:
            collapsed = collapse_changes(
                changes, spec.keys, data_columns, ctx, ChangeOrder.of(spec)
            )
            since = run.lap("read", since)
        since = run.lap("silver_state", since)
    try:
        fault_point(FaultPoint.AFTER_READ)
        schema = changes.select(*(f"`{c}`" for c in data_columns)).schema
        layout = SilverLayout.of(spec, schema)
        layout = ensure_silver(spark, spec.target, spec.id, schema, layout)
        since = run.lap("silver_check", since)
        silver_state = state.state
        if silver_state is None:  # switched off, or failed on its thread: its error, classified
            with interpreted(spark):
                silver_state = classified(ctx, partial(load_table_state, spark, spec.target))
            since = run.lap("silver_state", since)
        stamp = silver_stamp(
            spec.id,
            generation=plan.silver.generation,
            run_id=run.run_id,
            mode=RunMode.INCREMENTAL.value,
            start_version=start,
            end_version=end,
            source_table_id=plan.window.table_id,
            **spec_metadata(plan.spec_record, plan.forward_only_after()),
        )
        writer = SilverWriter(spark, spec.target, layout, stamp, plan.silver.generation)
        tombstones = Tombstones.of(run.control.root, spec)
        silver_filter = None
        if writer.filters_keys:
            with interpreted(spark):
                silver_filter = classified(
                    ctx, partial(changes_key_filter, spark, spec.target, collapsed, layout)
                )
            since = run.lap("key_filter", since)
        if tombstones is not None:
            apply = partial(
                tombstones.apply, spark, writer, collapsed, truncation, silver_filter=silver_filter
            )
        else:
            apply = partial(writer.apply_changes, collapsed, silver_filter)
        # A small change set's MERGE into a small silver runs interpreted too, and rewrites
        # the files it touches rather than writing deletion vectors.
        if plan.is_small_incremental():
            with interpreted_merge(spark, silver_state), copy_on_write_merge(spark, silver_state):
                classified(ctx, apply)
        else:
            classified(ctx, apply)
    finally:
        collapsed.release()
    since = run.lap("merge", since)
    # `write` is silver's part of the run: its checks, the key filter and the MERGE.
    run.timings["write"] = sum(run.timings.get(step, 0.0) for step in WRITE_STEPS)
    fault_point(FaultPoint.AFTER_MERGE)
    committed = find_run_commit(spec.target, spec.id, run.run_id)
    if committed is None:
        # Delta skipped the MERGE (txnVersion not above the stored one): a newer run of this
        # pipeline applied a later range first. Silver's watermark is the truth to report.
        applied = read_silver_state(spec.target, spec.id).watermark
        logger.warning(
            "%s: a newer run already applied up to %s; nothing written", spec.id, applied
        )
        _write_control(run, plan, RunMode.INCREMENTAL, applied, None, (0, 0, 0), start=start)
        return _result(run, plan, RunMode.INCREMENTAL, start, end, applied, (0, 0, 0))
    with interpreted(spark):
        counts = commit_counts(spark, spec.target, committed, spec.delete_mode)
    since = run.lap("commit_counts", since)
    fault_point(FaultPoint.BEFORE_CONTROL)
    note = _spec_note(plan, rebuilt=False)
    incident = SPEC_FORWARD_ONLY if note is not None else None
    _write_control(run, plan, RunMode.INCREMENTAL, end, incident, counts, start=start, message=note)
    run.lap("control", since)
    return _result(run, plan, RunMode.INCREMENTAL, start, end, end, counts)


def _rebuild(
    run: _Run, plan: RunPlan, problem: CdfPlatformError | None, *, requested: bool
) -> RunResult:
    spec = plan.spec
    # The planned snapshot read keeps its name; a requested one, or an incremental run falling
    # back, is a rebuild.
    mode = plan.mode if plan.mode.reads_snapshot and not requested else RunMode.REBUILD
    # Pin V first, from the log: commits landing from now on wait for the next incremental run.
    version = plan.end_version
    if problem is not None:
        # One line: the whole message (with what to do) is the load log's and the run's.
        logger.warning(
            "%s: %s (%s); rebuilding from bronze version %d",
            spec.id,
            type(problem).__name__,
            problem.incident_code,
            version,
        )
    spark = run.spark
    since = time.monotonic()
    try:
        request = RebuildRequest(
            version=version,
            silver=plan.silver,
            run_id=run.run_id,
            mode=mode.value,
            source_table_id=plan.window.table_id,
            source_reset=isinstance(problem, SourceReset),
            version_timestamp=plan.window.timestamp_of(version),
            rewrite=_spec_rewrite(plan),
        )
        tombstones = Tombstones.of(run.control.root, spec)
        if tombstones is not None:
            outcome = fold_events(spark, spec, request, tombstones)
        else:
            outcome = rebuild_silver(spark, spec, request)
    except CdfPlatformError as err:
        _log_incident(run, plan, err, mode=mode)
        raise
    since = run.lap("write", since)
    counts = silver_commit_counts(spark, spec.target, spec.id, run.run_id, spec.delete_mode)
    incident = (
        problem.incident_code if problem is not None else ("MANUAL_REBUILD" if requested else None)
    )
    message = str(problem) if problem is not None else None
    # A snapshot source's history only ever holds its snapshots: that is what it is, not a loss.
    # An event log's rebuild folds every event bronze holds, each dated by its own sequence: its
    # history between the watermark and V is whole.
    if (
        spec.history is HistoryMode.SCD2
        and plan.silver.watermark is not None
        and mode is not RunMode.SNAPSHOT
        and spec.changes is not ChangeSource.EVENTS
    ):
        message = "; ".join(filter(None, (message, rebuild_note(plan.silver.watermark, version))))
    if isinstance(problem, SpecChanged):
        message = None  # the note says what the run did; the problem's remedy is done
    message = "; ".join(filter(None, (message, _spec_note(plan, rebuilt=True), outcome.note)))
    message = message or None
    _write_control(
        run, plan, mode, version, incident, counts, message=message, generation=outcome.generation
    )
    return _result(run, plan, mode, None, version, version, counts, incident, message)


def _write_control(
    run: _Run,
    plan: RunPlan,
    mode: RunMode,
    watermark_after: int | None,
    incident: str | None,
    counts: tuple[int, int, int],
    *,
    start: int | None = None,
    message: str | None = None,
    generation: int | None = None,
    before: int | None = -1,
) -> None:
    """A load-log row for what the run did and the pipeline's state row; `before`: the
    watermark the row starts from, when not silver's before the run (a repair's)."""
    spec = plan.spec
    if mode is not RunMode.NOOP:
        # A column this run widened in silver (bronze's type widening) is said in the load log.
        widened = silver_widenings(spec.target, plan.silver.silver_version)
        message = "; ".join(filter(None, (message, *(f"silver {w}" for w in widened)))) or None
    finished = datetime.now(UTC)
    run.control.append_log(
        LoadLogEntry(
            run_id=run.run_id,
            pipeline_id=spec.id,
            mode=mode.value,
            outcome="REPAIRED" if mode is RunMode.NOOP else "SUCCESS",
            started_at=run.started_at,
            finished_at=finished,
            incident_code=incident,
            message=message,
            start_version=start,
            end_version=watermark_after if mode is not RunMode.NOOP else None,
            watermark_before=plan.silver.watermark if before == -1 else before,
            watermark_after=watermark_after,
            rows_inserted=counts[0],
            rows_updated=counts[1],
            rows_deleted=counts[2],
            plan_seconds=run.timings.get("plan", 0.0),
            read_seconds=run.timings.get("read", 0.0),
            write_seconds=run.timings.get("write", 0.0),
            spec_fingerprint=plan.spec_fingerprint,
            spec=shaping_fields(spec),
        ),
    )
    run.control.upsert_state(
        {
            "pipeline_id": spec.id,
            "source": spec.source,
            "target": spec.target,
            "source_table_id": plan.window.table_id,
            "generation": plan.silver.generation if generation is None else generation,
            "last_commit_version": watermark_after,
            "last_success_at": finished,
            "last_mode": mode.value,
            "status": "OK",
            "delete_mode": spec.delete_mode.value,
            "fallback_mode": spec.fallback_mode.value,
            "max_allowed_lag_hours": spec.max_allowed_lag_hours,
            "min_headroom_hours": spec.min_headroom_hours,
            # The mirror of silver's spec record; a no-op keeps the one silver's log holds.
            **_mirrored_spec(plan, mode),
        },
    )


def _mirrored_spec(plan: RunPlan, mode: RunMode) -> dict[str, str]:
    """The state row's spec record: what this run stamped on silver, or for a no-op what
    silver's log holds (a no-op writes no commit, so an edit it did not take stays pending)."""
    record = plan.spec_record if mode is not RunMode.NOOP else plan.silver.spec_record
    if record is None:
        return {}
    return {"spec_fingerprint": fingerprint_of(record), "spec_record": json.dumps(record)}


def _log_incident(
    run: _Run, plan: RunPlan, problem: CdfPlatformError, *, mode: RunMode | None = None
) -> None:
    """A FAILED load-log row for `problem` (`mode`: what the run was doing; default: the plan's)."""
    spec = plan.spec
    mode = mode or plan.mode
    rebuilding = mode.reads_snapshot
    run.control.append_log(
        LoadLogEntry(
            run_id=run.run_id,
            pipeline_id=spec.id,
            mode=mode.value,
            outcome="FAILED",
            started_at=run.started_at,
            finished_at=datetime.now(UTC),
            incident_code=problem.incident_code,
            message=str(problem),
            start_version=None if rebuilding else plan.start_version,
            end_version=plan.end_version,
            watermark_before=plan.silver.watermark,
            watermark_after=plan.silver.watermark,
            spec_fingerprint=plan.spec_fingerprint,
            spec=shaping_fields(spec),
        ),
    )


def _result(
    run: _Run,
    plan: RunPlan,
    mode: RunMode,
    start: int | None,
    end: int | None,
    watermark_after: int | None,
    counts: tuple[int, int, int],
    incident: str | None = None,
    message: str | None = None,
) -> RunResult:
    if mode is RunMode.NOOP:
        lag_after = plan.assessment
    else:
        since = time.monotonic()
        now = datetime.now(UTC)
        lag_after = assess_consumer(
            compute_replay_window(plan.spec.source, now=now), watermark_after, now=now
        )
        run.lap("lag_after", since)
    return RunResult(
        pipeline_id=plan.spec.id,
        run_id=run.run_id,
        mode=mode,
        start_version=start,
        end_version=end,
        watermark_before=plan.silver.watermark,
        watermark_after=watermark_after,
        rows_inserted=counts[0],
        rows_updated=counts[1],
        rows_deleted=counts[2],
        duration_seconds=time.monotonic() - run.clock,
        spark_started=run.spark_started,
        lag_before=plan.assessment,
        lag_after=lag_after,
        incident_code=incident,
        incident_message=message,
        timings=dict(run.timings),
    )
