"""`rebuild_sensor`: repair a lost replay window without a person.

It reads the latest `replay_window` evaluation of every silver asset from the instance. Check
evaluations are the signal, not run failures: a LOST window fails the run that evaluated the
check (a blocking ERROR check, `DagsterAssetCheckFailedError`), but so does any other failure,
and a run-failure sensor could not tell which window, watermark and loss it was. For each new
evaluation that says LOST it requests `rebuild_job` for that pipeline, once per loss:

- the cursor remembers the last evaluation handled per pipeline, so a tick only looks at newer
  evaluations;
- the run key `rebuild:<pipeline>:<watermark>:<latest version>` names the loss, so a later
  evaluation of the same loss (the checks schedule runs again before the rebuild) is
  deduplicated by Dagster.

Consumer assets of the watermark IO manager (`cdf_platform.orchestration.sensors.consumers`) are
repaired the same way from their own `replay_window` evaluations: one `recompute_job` run per
loss (run key `recompute:<consumer>:<watermark>:<latest version>`), in which every input is read
in full.

While the incremental sensor of the same code location runs, pipelines are its to repair: it
computes every window's state on each tick and requests the repair in the tick that sees the
loss (see `cdf_platform.orchestration.sensors.incremental_sensor`). Two sensors evaluated in one
daemon iteration cannot see each other's requests, so the rebuild sensor then requests no pipeline
rebuild at all (its skip reason names the losses it leaves to the incremental sensor). It repairs
pipelines itself when the incremental sensor is stopped, or when it is evaluated outside a code
location (no daemon ticks the incremental sensor there). Even then it requests nothing for a
pipeline with a run pending (queued or in progress): that run's plan meets the loss.

FAIL_FAST pipelines (and consumers) are never repaired automatically: the sensor names them in
its skip reason on every tick while their latest evaluation says LOST, and waits for a person
(who runs `rebuild_job` with `override_fail_fast: true`, or `recompute_job` for a consumer).
A repair that fails is not retried blindly either: it is retried only for a new loss (the
watermark or the input moved).
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from dagster._core.scheduler.instigation import InstigatorStatus, InstigatorType
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecord

from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.jobs.silver_jobs import REBUILD_JOB, rebuild_run_config
from cdf_platform.orchestration.sensors.check_records import latest_evaluated
from cdf_platform.orchestration.sensors.consumers import RECOMPUTE_JOB, ConsumerAsset
from cdf_platform.orchestration.sensors.incremental_sensor import (
    INCREMENTAL_SENSOR,
    pending_pipelines,
)
from cdf_platform.orchestration.sensors.sensor_instance import EvaluationInstance
from cdf_platform.orchestration.sensors.sensor_stop import STOPPED_REASON, stopped
from cdf_platform.orchestration.shared.keys import (
    INCIDENT_TAG,
    PIPELINE_TAG,
    PRIORITY_TAG,
    silver_key,
)
from cdf_platform.planning.repair import repair_decision
from cdf_platform.planning.status import WindowState

REBUILD_SENSOR = "rebuild_sensor"


def _read_cursor(cursor: str | None) -> dict[str, int]:
    if not cursor:
        return {}
    return {str(key): int(value) for key, value in json.loads(cursor).items()}


def _figure(evaluation: dg.AssetCheckEvaluation, name: str) -> object:
    value = evaluation.metadata.get(name)
    return value.value if value is not None else None


def incremental_sensor_runs(
    context: dg.SensorEvaluationContext, instance: dg.DagsterInstance, *, declared: bool
) -> bool:
    """Whether the daemon ticks the incremental sensor of `context`'s code location: its stored
    status in `instance` (an operator started or stopped it), else `declared` (its default
    status in code). Outside a code location (a sensor evaluated directly) no daemon ticks it."""
    location = context.code_location_origin
    if location is None:
        return False
    for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
        repository = state.origin.repository_origin
        if (
            state.name == INCREMENTAL_SENSOR
            and repository.repository_name == context.repository_name
            and repository.code_location_origin.location_name == location.location_name
        ):
            if state.status in (InstigatorStatus.RUNNING, InstigatorStatus.STOPPED):
                return state.status is InstigatorStatus.RUNNING
            break  # DECLARED_IN_CODE: the default in code decides
    return declared


@dataclass(frozen=True)
class _Watched:
    """One asset whose replay_window the sensor reads, and how a loss is repaired."""

    name: str  # the cursor's key and the run key's subject
    key: dg.AssetKey
    fallback_mode: FallbackMode | None  # None: the evaluation says (a consumer's figure)
    job_name: str
    run_config: dg.RunConfig | None
    run_key_prefix: str


def _watched(specs: list[PipelineSpec], consumers: Sequence[ConsumerAsset]) -> list[_Watched]:
    pipelines = [
        _Watched(
            spec.id,
            silver_key(spec.id),
            spec.fallback_mode,
            REBUILD_JOB,
            rebuild_run_config(spec.id),
            "rebuild",
        )
        for spec in specs
    ]
    return pipelines + [
        _Watched(consumer.id, consumer.key, None, RECOMPUTE_JOB, None, "recompute")
        for consumer in consumers
    ]


@dataclass
class _Tick:
    """What one evaluation of the rebuild sensor decided, pipeline by pipeline."""

    handled: dict[str, int]  # the cursor: each asset's newest evaluation already acted on
    instance: dg.DagsterInstance  # the daemon's, as `EvaluationInstance` keeps it
    requests: list[dg.RunRequest] = field(default_factory=list)
    left_for_a_person: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    left_to_incremental: list[str] = field(default_factory=list)
    pending: dict[str, str] | None = None  # read once, when a new loss is seen
    incremental_repairs: bool | None = None  # read once, when a new loss is seen

    def result(self) -> dg.SensorResult:
        cursor = json.dumps(self.handled, sort_keys=True)
        if self.requests:
            return dg.SensorResult(run_requests=self.requests, cursor=cursor)
        reason = "no new replay_window loss"
        if self.left_to_incremental:
            reason += (
                f"; repaired by {INCREMENTAL_SENSOR} (running): "
                f"{', '.join(self.left_to_incremental)}"
            )
        if self.waiting:
            reason += f"; waiting for the pending run of: {', '.join(self.waiting)}"
        if self.left_for_a_person:
            reason += f"; left for a person (FAIL_FAST): {', '.join(self.left_for_a_person)}"
        return dg.SensorResult(skip_reason=dg.SkipReason(reason), cursor=cursor)


def _fallback_mode(item: _Watched, evaluation: dg.AssetCheckEvaluation) -> FallbackMode:
    """The watched asset's fallback: its spec's, else (a consumer) the evaluation's figure."""
    if item.fallback_mode is not None:
        return item.fallback_mode
    figure = _figure(evaluation, "fallback_mode")
    known = {mode.value: mode for mode in FallbackMode}
    return known.get(str(figure), FallbackMode.SNAPSHOT_REBUILD)


def _run_request(
    item: _Watched, evaluation: dg.AssetCheckEvaluation, *, problem_code: str, by_name: bool
) -> dg.RunRequest:
    """The repair of `item`'s loss: once per loss (its run key), first in the queue."""
    run_key = (
        f"{item.run_key_prefix}:{item.name}:{_figure(evaluation, 'watermark')}:"
        f"{_figure(evaluation, 'latest_version')}"
    )
    tags = {INCIDENT_TAG: problem_code, PRIORITY_TAG: "1"}
    if item.job_name == REBUILD_JOB:
        tags[PIPELINE_TAG] = item.name
    run_config: dg.RunConfig | dict[str, Any] = item.run_config or {}
    watermark = _figure(evaluation, "watermark")
    if item.job_name == REBUILD_JOB and isinstance(watermark, int):
        # A run that repaired this loss first (the incremental sensor's, from its own tick)
        # makes this one a no-op: see SilverRunConfig.repair_of.
        run_config = rebuild_run_config(item.name, repair_of=watermark)
    return dg.RunRequest(
        run_key=run_key,
        job_name=item.job_name if by_name else None,
        asset_selection=[item.key],
        run_config=run_config,
        tags=tags,
    )


@dataclass(frozen=True)
class _Watcher:
    """How the rebuild sensor acts on each watched asset's newest replay_window evaluation.

    Attributes:
        pipeline_ids: The silver pipelines of the code location (their pending runs).
        running: Whether the incremental sensor is declared running (its default status).
        by_name: Whether run requests name their job (the sensor launches several).
    """

    pipeline_ids: set[str]
    running: bool
    by_name: bool

    def owned_elsewhere(
        self, context: dg.SensorEvaluationContext, tick: _Tick, item: _Watched, evaluated: int
    ) -> bool:
        """Whether a silver loss new to this sensor (its evaluation `evaluated`) is another's
        to repair: the running incremental sensor's (its tick saw the loss too, or will: one
        owner, so never two repairs), or a pending run's."""
        if tick.incremental_repairs is None:
            tick.incremental_repairs = incremental_sensor_runs(
                context, tick.instance, declared=self.running
            )
        if tick.incremental_repairs:
            tick.handled[item.name] = evaluated
            tick.left_to_incremental.append(item.name)
            return True
        if tick.pending is None:
            tick.pending = pending_pipelines(tick.instance, self.pipeline_ids)
        if item.name in tick.pending:
            # One pending run per pipeline: that run's plan meets the loss and rebuilds (or
            # its checks then pass). The evaluation stays unhandled, so a later tick looks
            # again once the run has ended.
            tick.waiting.append(f"{item.name} (run {tick.pending[item.name][:8]} pending)")
            return True
        return False

    def look_at(
        self,
        context: dg.SensorEvaluationContext,
        tick: _Tick,
        item: _Watched,
        record: AssetCheckExecutionRecord | None,
    ) -> None:
        """Act on `item`'s newest evaluated replay_window execution `record` (None: never
        evaluated), once per loss."""
        evaluation = record.evaluation if record is not None else None
        if record is None or not isinstance(evaluation, dg.AssetCheckEvaluation):
            return  # never evaluated yet
        is_new = record.id > tick.handled.get(item.name, -1)
        if evaluation.passed or _figure(evaluation, "state") != WindowState.LOST.value:
            tick.handled[item.name] = record.id
            return
        decision = repair_decision(_fallback_mode(item, evaluation))
        silver_loss = is_new and item.job_name == REBUILD_JOB and decision.automatic
        if silver_loss and self.owned_elsewhere(context, tick, item, record.id):
            return
        tick.handled[item.name] = record.id
        problem_code = str(_figure(evaluation, "problem_code"))
        if not decision.automatic:
            # An open incident: named on every tick until a person repairs it or the check
            # passes.
            tick.left_for_a_person.append(item.name)
            if is_new:
                context.log.warning(
                    "%s lost its replay window (%s) but is FAIL_FAST: not repairing; run %s "
                    "once a person has decided%s",
                    item.name,
                    problem_code,
                    item.job_name,
                    " (with override_fail_fast)" if item.job_name == REBUILD_JOB else "",
                )
            return
        if is_new:
            request = _run_request(
                item, evaluation, problem_code=problem_code, by_name=self.by_name
            )
            context.log.info(
                "%s lost its replay window (%s): requesting %s",
                item.name,
                problem_code,
                request.run_key,
            )
            tick.requests.append(request)


def build_rebuild_sensor(
    specs: list[PipelineSpec],
    *,
    consumers: Sequence[ConsumerAsset] = (),
    jobs: Sequence[Any] = (),
    running: bool = True,
) -> dg.SensorDefinition:
    """The rebuild sensor over the pipelines `specs` and the consumer assets `consumers`.

    Args:
        jobs: the jobs it launches (`rebuild_job`, and `recompute_job` when there are
            consumers); by default `rebuild_job` by name.
    """
    watched = _watched(specs, consumers)
    check_keys = [dg.AssetCheckKey(item.key, REPLAY_WINDOW) for item in watched]
    watcher = _Watcher({spec.id for spec in specs}, running, by_name=bool(jobs))
    instances = EvaluationInstance()

    @dg.sensor(
        name=REBUILD_SENSOR,
        job_name=None if jobs else REBUILD_JOB,
        jobs=list(jobs) or None,
        minimum_interval_seconds=30,
        description="Requests recompute_job once per lost replay window of a consumer asset, "
        "and rebuild_job once per lost window of a silver asset while incremental_sensor is "
        "stopped (while it runs, it repairs silver itself), read from the latest replay_window "
        "check evaluations (FAIL_FAST ones are left for a person).",
        # Self-repair is the product: on from the start unless turned off ($CDF_AUTOMATION).
        default_status=dg.DefaultSensorStatus.RUNNING
        if running
        else dg.DefaultSensorStatus.STOPPED,
    )
    def _rebuild_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        """One run request per pipeline whose newest replay_window evaluation says LOST."""
        tick = _Tick(_read_cursor(context.cursor), instances.of(context))
        if stopped(context, tick.instance, REBUILD_SENSOR):
            return dg.SensorResult(skip_reason=dg.SkipReason(STOPPED_REASON))
        # Every watched asset's newest evaluation in one read (not a query per asset).
        latest = latest_evaluated(tick.instance, check_keys)
        for item, key in zip(watched, check_keys, strict=True):
            watcher.look_at(context, tick, item, latest.get(key))
        return tick.result()

    return _rebuild_sensor
