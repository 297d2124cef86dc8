"""`incremental_sensor`: run silver as soon as its bronze table has new versions.

Each tick compares every pipeline's watermark with its bronze table's latest version from the
logs alone (no Spark, well under a second per pipeline) and requests `incremental_job` for the
pipelines that are behind, and only for a pipeline with no run pending (a run covering its
silver asset that is queued or in progress, whoever launched it, or failed and about to be
retried by Dagster's run retries): that run covers every version up to the latest at its start,
so the queue holds at most one run per pipeline however fast bronze commits.

Pipelines whose runs are small (an incremental run over at most SMALL_CHANGE_BYTES of change
files, an initial load of a snapshot that small, or a refresh) share runs of at most
`CDF_PIPELINES_PER_RUN` pipelines (run key `batch:<hash of what each was asked>`): one process
and one Spark driver apply them all, each its own step with its own watermark, pool and
failure, so a fleet's onboarding or catch-up pays a driver start per batch, not per pipeline.
They are spread over as many runs as the instance runs silver runs at once (its run queue's
limit on the silver queue, `silver_run_slots`), so a fleet's catch-up uses every slot; an
instance without a limit gets as few runs as hold them.
A pipeline with a large change set or snapshot, a repair, a spec edit or a location to find
gets a run of its own (run key
`<reason>:<pipeline>:<key>`, e.g. `incremental:<pipeline>:<latest version>`), so it holds no
small one back. Every run records what it asked of each pipeline (`cdf_platform/requested`).

A run that died (its process killed or lost, the run canceled, or its steps failed on a
retryable class such as the engine going away, once Dagster's retries of it are spent) is
requested again on the next tick: the run key then names the dead run
(`...:after:<run id>`), so Dagster's run-key deduplication does not drop it. A pipeline whose
run failed in its own code (its step failed: a classified error) is not asked the same thing
again, since it would fail the same way; the next bronze version, or a person, brings its next
run. Runs of one pipeline never overlap: its
silver asset holds the pipeline's pool (see `cdf_platform.orchestration.shared.keys.pipeline_pool`
for the dagster.yaml limit). A pipeline whose window is lost is seen in the same tick: under
SNAPSHOT_REBUILD it gets one run per loss (run key `repair:<pipeline>:<watermark>:<latest>`),
whose plan meets the loss and rebuilds silver (load log: the loss's incident code); a FAIL_FAST
one is left for a person. The rebuild sensor's later request for the same loss, read from the
checks, then finds it repaired and starts no Spark (`SilverRunConfig.repair_of`). A missing
bronze table is waited for, and a pipeline whose input is wrong (BLOCKED) is left to its failing
check. A pipeline naming a catalog table no run has located yet gets one run (run key
`locate:<pipeline>:first`): the run asks Spark's catalog and records the location.

A pipeline whose spec was edited since silver was written (`SPEC_CHANGED`) gets one run per
spec fingerprint (run key `spec:<pipeline>:<fingerprint>`): the run reconciles silver under the
new spec, or refuses under FAIL_FAST.

A caught-up silver asset whose last materialization is half its freshness window old (the
window is `max_allowed_lag_hours`) gets a refresh run (run key
`refresh:<pipeline>:<watermark>:<period>`): a no-op that reads the logs, finds nothing to apply
and materializes, so Dagster's freshness and `consumer_lag` agree while bronze is quiet.
"""

import datetime
import hashlib
import logging
import time
from dataclasses import dataclass

import dagster as dg

from cdf_platform.core.config import DEFAULT_PIPELINES_PER_RUN
from cdf_platform.core.errors import CdfPlatformError, TableNameNotLocated
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.assets.silver import freshness_window
from cdf_platform.orchestration.jobs.silver_jobs import INCREMENTAL_JOB, REBUILD_JOB
from cdf_platform.orchestration.sensors.tick_reason import TickReason
from cdf_platform.orchestration.shared.keys import (
    AUTO_RETRY_RUN_ID_TAG,
    FAILURE_REASON_TAG,
    PIPELINE_TAG,
    PRIORITY_TAG,
    QUEUE_TAG,
    REQUESTED_TAG,
    SILVER_QUEUE,
    WILL_RETRY_TAG,
    silver_key,
    silver_pipeline_ids,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.step_failures import RETRY_ON_STEP_FAILURE_TAG
from cdf_platform.planning.assessment import ControlReads
from cdf_platform.planning.plan import plan_from
from cdf_platform.planning.repair import repair_decision
from cdf_platform.planning.status import (
    PipelineStatus,
    WindowState,
    status_and_assessment,
)
from cdf_platform.state.control import ControlTable

INCREMENTAL_SENSOR = "incremental_sensor"
# Under the daemon's 5 s sensor loop (dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME): each loop
# ticks, 5.0 s apart. At 5 a loop often found 4.99 s since the last tick began and skipped it
# (ticks 5 or 10 s apart, 7.3 s on average; `python -m bench.tick_cadence`). A tick reads logs
# without Spark (0.5 s at 500 pipelines) and requests nothing for a pipeline with a run pending.
TICK_SECONDS = 4
# A run in one of these states is pending: it will still read the logs and apply what it finds.
PENDING_STATUSES = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
_NOT_OURS = (WindowState.SOURCE_MISSING, WindowState.BLOCKED)
_MAY_SHARE = (WindowState.OK, WindowState.LOW_HEADROOM, WindowState.NOT_STARTED)
# Dagster's failure reasons of a run that failed in its own code: a rerun at the same bronze
# version would fail the same way. Any other failure (the process killed or lost, a start
# timeout) is a run that died.
_FAILED_IN_ITS_CODE = frozenset({"STEP_FAILURE", "JOB_INITIALIZATION_FAILURE"})
# How long a failed run marked for Dagster's run retries counts as pending while its retry is
# not created yet (the retry daemon runs beside the sensors, within seconds).
_RETRY_WAIT = datetime.timedelta(hours=1)
# A run's failure and Dagster's decision whether to retry it (its WILL_RETRY_TAG) are two
# writes: a failed run without the decision, when the instance retries runs, counts as pending
# this long (the decision follows within milliseconds; the retry daemon writes it for a run
# whose writer died between the two).
_DECISION_WAIT = datetime.timedelta(minutes=1)
# The platform's jobs whose run without an asset selection writes every silver table.
_WRITE_ALL_SILVER = frozenset({INCREMENTAL_JOB, REBUILD_JOB})


@dataclass(frozen=True)
class WantedRun:
    """A run the tick wants for a pipeline: why, the run key's subject, and whether it may share
    a run with other pipelines (`RunPlan.shares_a_run`, or a refresh: no large read)."""

    spec: PipelineSpec
    reason: str
    key: str
    shares: bool = False

    @property
    def requested(self) -> str:
        """What the tick asks of the pipeline, as the run key and the requested tag name it."""
        return f"{self.reason}:{self.key}"


def _covered(run: dg.DagsterRun, pipeline_ids: set[str]) -> set[str]:
    """The pipelines among `pipeline_ids` whose silver `run` writes: those of its asset
    selection, or every one for a run of a whole platform job."""
    if run.asset_selection is None:
        return set(pipeline_ids) if run.job_name in _WRITE_ALL_SILVER else set()
    return set(silver_pipeline_ids(run.asset_selection)) & pipeline_ids


def requested_of(run: dg.DagsterRun) -> dict[str, str]:
    """Pipeline id -> what the sensor requested of it in `run` (its REQUESTED_TAG)."""
    value = run.tags.get(REQUESTED_TAG, "")
    pairs = (item.split("=", 1) for item in value.split(",") if "=" in item)
    return {pipeline_id: requested for pipeline_id, requested in pairs}


def _failed_in_its_code(run: dg.DagsterRun) -> bool:
    """Whether `run` failed in its own code (a step failure: a classified error), not on a
    failure that running it again may not meet (the engine restarted, a store briefly away:
    marked `RETRY_ON_STEP_FAILURE_TAG` by the step, `mark_retryable_run`)."""
    return (
        run.status is dg.DagsterRunStatus.FAILURE
        and run.tags.get(FAILURE_REASON_TAG) in _FAILED_IN_ITS_CODE
        and run.tags.get(RETRY_ON_STEP_FAILURE_TAG) != "true"
    )


def _died(run: dg.DagsterRun) -> bool:
    """Whether `run` died (failed, but not in its own code) or was canceled."""
    failed = run.status is dg.DagsterRunStatus.FAILURE and not _failed_in_its_code(run)
    return failed or run.status is dg.DagsterRunStatus.CANCELED


def newest_runs(
    instance: dg.DagsterInstance, pipeline_ids: set[str], limit: int
) -> dict[str, dg.DagsterRun]:
    """Pipeline id -> the newest silver run that covered it, among the `limit` newest runs of
    the silver queue (one query); a pipeline none of them covered is left out."""
    records = instance.get_run_records(dg.RunsFilter(tags={QUEUE_TAG: SILVER_QUEUE}), limit=limit)
    newest: dict[str, dg.DagsterRun] = {}
    for record in records:  # newest first
        for pipeline_id in _covered(record.dagster_run, pipeline_ids):
            newest.setdefault(pipeline_id, record.dagster_run)
    return newest


def pending_pipelines(instance: dg.DagsterInstance, pipeline_ids: set[str]) -> dict[str, str]:
    """Pipeline id -> the id of a silver run covering it that is not finished yet (not started,
    queued, starting, running or canceling), or failed and marked for Dagster's run retries
    whose retry is not created yet or is itself pending, or failed a moment ago and not yet
    decided on by them, for the pipelines among `pipeline_ids` that have one (at most four
    queries, whatever the number of pipelines): each has its run pending, and no other is
    requested for it."""
    if not pipeline_ids:
        return {}
    # A run that dies goes through four states, written one after another: failed (the
    # monitoring daemon finding its process gone), decided on (WILL_RETRY_TAG), its retry
    # created, marked retried (AUTO_RETRY_RUN_ID_TAG). The reads follow that order, so a run
    # moving on between two reads is met by a later one; read out of order, a run moving past
    # a read's state before it, after the read of the state before, was in neither, and a
    # run was requested beside its retry. Every pending run, whoever launched it, first.
    runs = instance.get_run_records(dg.RunsFilter(statuses=PENDING_STATUSES))
    undecided = (
        [
            record
            for record in _failed(instance, {QUEUE_TAG: SILVER_QUEUE}, _DECISION_WAIT)
            if WILL_RETRY_TAG not in record.dagster_run.tags
        ]
        if instance.run_retries_enabled  # else no run is ever decided on
        else []
    )
    retrying = _failed(instance, {QUEUE_TAG: SILVER_QUEUE, WILL_RETRY_TAG: "true"}, _RETRY_WAIT)
    retries = [
        record.dagster_run.tags[AUTO_RETRY_RUN_ID_TAG]
        for record in retrying
        if AUTO_RETRY_RUN_ID_TAG in record.dagster_run.tags
    ]
    if retries:
        runs = [
            *runs,
            *instance.get_run_records(dg.RunsFilter(run_ids=retries, statuses=PENDING_STATUSES)),
        ]
    pending: dict[str, str] = {}
    for record in [*runs, *retrying, *undecided]:
        run = record.dagster_run
        if AUTO_RETRY_RUN_ID_TAG in run.tags:
            continue  # retried: the retry is the pending run, if any
        for pipeline_id in _covered(run, pipeline_ids):
            pending.setdefault(pipeline_id, run.run_id)
    return pending


def _failed(
    instance: dg.DagsterInstance, tags: dict[str, str], within: datetime.timedelta
) -> list[dg.RunRecord]:
    """The failed runs carrying `tags` last updated `within` ago or less."""
    since = datetime.datetime.now(datetime.UTC) - within
    filters = dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE], tags=tags, updated_after=since)
    return list(instance.get_run_records(filters))


def silver_run_slots(instance: dg.DagsterInstance) -> int | None:
    """How many silver runs `instance` runs at once: the lowest of its run queue's limits that
    apply to runs tagged `cdf_platform/queue: silver` (a limit on that tag and value, on the
    tag whatever its value, or on all runs); None when none applies (no queued run
    coordinator, or no limit)."""
    config = instance.get_concurrency_config().run_queue_config
    if config is None:
        return None
    limits = [config.max_concurrent_runs] if config.max_concurrent_runs >= 0 else []
    for rule in config.tag_concurrency_limits or ():
        value = rule.get("value")
        # No value: one limit over every value; a dict (applyLimitPerUniqueValue): per value.
        if rule.get("key") == QUEUE_TAG and (
            value in (None, SILVER_QUEUE) or isinstance(value, dict)
        ):
            limits.append(int(rule["limit"]))
    return min(limits) if limits else None


def run_requests(
    wanted: list[WantedRun],
    newest: dict[str, dg.DagsterRun],
    *,
    max_pipelines_per_run: int,
    parallel_runs: int | None = None,
) -> tuple[list[dg.RunRequest], list[tuple[str, str]]]:
    """The run requests for `wanted` and the pipelines left out (each id with why).

    A pipeline whose newest run failed in its own code when asked the same thing is left out
    (it would fail the same way; the next bronze version, or a person, brings the next run). A
    pipeline whose newest run died is asked again, its run key naming the dead run (Dagster
    drops a request whose run key was used). Pipelines that may share a run go in runs of at
    most `max_pipelines_per_run`, spread evenly over as many runs as `parallel_runs` (the
    silver runs the instance runs at once) when that is more, never more runs than pipelines
    (one process for each run, each pipeline its own step, watermark and failure); the others
    get a run each."""
    requests: list[dg.RunRequest] = []
    left_out: list[tuple[str, str]] = []
    shared: list[tuple[WantedRun, str]] = []
    for item in wanted:
        last = newest.get(item.spec.id)
        if (
            last is not None
            and _failed_in_its_code(last)
            and requested_of(last).get(item.spec.id) == item.requested
        ):
            left_out.append((item.spec.id, f"run {last.run_id[:8]} failed at {item.key}"))
            continue
        after = f":after:{last.run_id[:8]}" if last is not None and _died(last) else ""
        if item.shares:
            shared.append((item, after))
        else:
            requests.append(_request([(item, after)]))
    # As many runs as run at once (their Spark work shares the engine: a run's step waits on
    # Dagster and the control tables while another's MERGE runs), at least as many as the limit
    # per run needs; the pipelines spread evenly over them, so the runs finish together (a
    # fleet is caught up when its slowest run ends).
    runs = max(-(-len(shared) // max_pipelines_per_run), min(parallel_runs or 1, len(shared)))
    start = 0
    for index in range(runs):
        size = len(shared) // runs + (1 if index < len(shared) % runs else 0)
        requests.append(_request(shared[start : start + size]))
        start += size
    return requests, left_out


def _request(items: list[tuple[WantedRun, str]]) -> dg.RunRequest:
    """One run for the pipelines of `items` (each with its dead-run suffix)."""
    tags = {REQUESTED_TAG: ",".join(f"{item.spec.id}={item.requested}" for item, _ in items)}
    if len(items) == 1:
        ((item, after),) = items
        run_key = f"{item.reason}:{item.spec.id}:{item.key}{after}"
        tags[PIPELINE_TAG] = item.spec.id
        if item.reason == "repair":
            tags[PRIORITY_TAG] = "1"  # a lost window goes first in the queue
    else:
        named = ",".join(f"{item.spec.id}={item.requested}{after}" for item, after in items)
        run_key = f"batch:{hashlib.sha256(named.encode()).hexdigest()[:20]}"
    return dg.RunRequest(
        run_key=run_key,
        asset_selection=[silver_key(item.spec.id) for item, _ in items],
        tags=tags,
    )


def last_materialized(instance: dg.DagsterInstance, specs: list[PipelineSpec]) -> dict[str, float]:
    """Pipeline id -> the timestamp of its silver asset's last materialization, for the
    `specs` that have one (one query per 500 assets, not one per pipeline)."""
    keys = {silver_key(spec.id): spec.id for spec in specs}
    found: dict[str, float] = {}
    ordered = list(keys)
    for start in range(0, len(ordered), 500):
        for record in instance.get_asset_records(ordered[start : start + 500]):
            event = record.asset_entry.last_materialization
            if event is not None:
                found[keys[record.asset_entry.asset_key]] = event.timestamp
    return found


def refresh_due(spec: PipelineSpec, last_materialized: float | None, now: float) -> int | None:
    """The refresh period number when a caught-up silver asset is due for a refresh (its last
    materialization is half its freshness window old, or it has none), else None."""
    half = freshness_window(spec).total_seconds() / 2
    if last_materialized is not None and now - last_materialized < half:
        return None
    return int(now // half)


def assess(
    spec: PipelineSpec, control: ControlTable, reads: ControlReads | None = None
) -> tuple[PipelineStatus, bool]:
    """`spec`'s status and whether a run of it now may share a run with other pipelines'
    (`RunPlan.shares_a_run`: a small incremental run or initial load, nothing to fall back on),
    from one assessment (JVM-free); `reads` are `control`'s rows when the tick has read them."""
    # Foreign writes change no run: the sensor does not search silver's log for them.
    status, found = status_and_assessment(spec, control, reads=reads, foreign_writes=False)
    if found is None or status.state not in _MAY_SHARE:
        return status, False
    try:
        return status, plan_from(found).shares_a_run()
    except CdfPlatformError:
        return status, False


def _decide(
    log: logging.Logger,
    spec: PipelineSpec,
    control: ControlTable,
    reads: ControlReads,
    reason: TickReason,
) -> WantedRun | int | None:
    """The run `spec` wants in this tick; its watermark when it is caught up (a refresh may be
    due); None when it has no bronze version yet or is held back (why, told to `reason`)."""
    try:
        status, small = assess(spec, control, reads)
    except (CdfPlatformError, NotImplementedError) as err:
        # One unreadable pipeline (e.g. a remote table the JVM-free log reader does not
        # read yet) must not stop the others from being triggered.
        log.warning("%s: cannot read its status: %s", spec.id, err)
        code = getattr(err, "incident_code", type(err).__name__)
        reason.held_back(spec.id, code)
        return None
    if status.problem_code == TableNameNotLocated.incident_code:
        # Only a run can ask Spark's catalog where a named table lives: one run locates
        # it, and from then on this sensor reads its log like any other.
        return WantedRun(spec, "locate", "first")
    if status.state in _NOT_OURS:
        reason.held_back(spec.id, status.state.value)
        return None
    latest, watermark = status.latest_version, status.watermark
    if latest is None:
        return None
    if status.state is WindowState.LOST:
        decision = repair_decision(spec.fallback_mode)
        if not decision.automatic:
            reason.held_back(spec.id, f"LOST, {decision.why_not}")
            return None
        # Seen in this tick: the run's plan meets the loss and rebuilds (its fallback),
        # once per loss; the checks still record it.
        log.warning("%s: replay window lost (%s)", spec.id, status.problem_code)
        return WantedRun(spec, "repair", f"{watermark}:{latest}")
    if status.state is WindowState.SPEC_CHANGED:
        # The edited spec's run reconciles silver (or, FAIL_FAST, refuses and says so):
        # one request per spec fingerprint, whether bronze moved or not.
        log.info("%s: spec edited (%s)", spec.id, status.problem)
        return WantedRun(spec, "spec", str(status.spec_fingerprint))
    if watermark is None or latest > watermark:
        log.info("%s: bronze at version %d, watermark %s", spec.id, latest, watermark)
        return WantedRun(spec, "incremental", str(latest), shares=small)
    return watermark


def build_incremental_sensor(
    specs: list[PipelineSpec],
    *,
    running: bool = True,
    max_pipelines_per_run: int = DEFAULT_PIPELINES_PER_RUN,
) -> dg.SensorDefinition:
    """The incremental sensor over the pipelines `specs`, RUNNING from the start unless
    `running` is False; pipelines with small change sets share runs of at most
    `max_pipelines_per_run` pipelines."""
    pipeline_ids = {spec.id for spec in specs}

    @dg.sensor(
        name=INCREMENTAL_SENSOR,
        job_name=INCREMENTAL_JOB,
        minimum_interval_seconds=TICK_SECONDS,
        description="Requests a silver run when its bronze table has versions after the "
        "watermark, and the repair of a pipeline whose replay window is lost (its run rebuilds "
        "silver from a pinned snapshot, once per loss).",
        default_status=dg.DefaultSensorStatus.RUNNING
        if running
        else dg.DefaultSensorStatus.STOPPED,
    )
    def _incremental_sensor(
        context: dg.SensorEvaluationContext, lake: LakeLayout
    ) -> dg.SensorResult:
        """One run request per pipeline whose bronze table moved past the watermark (or whose
        names need locating, or whose caught-up silver is due for a refresh)."""
        control = lake.control()
        # Read once for the tick: each read returns every pipeline's row.
        reads = ControlReads.of(control, verified=False)  # no foreign-write search here
        wanted: list[WantedRun] = []
        reason = TickReason(len(specs))
        caught_up: list[tuple[PipelineSpec, int]] = []
        pending = pending_pipelines(context.instance, pipeline_ids)
        for spec in specs:
            if spec.id in pending:
                # Its queued or running run covers every version up to the latest at its start.
                reason.in_progress(spec.id, pending[spec.id])
                continue
            decided = _decide(context.log, spec, control, reads, reason)
            if isinstance(decided, WantedRun):
                wanted.append(decided)
            elif decided is not None:
                caught_up.append((spec, decided))
                reason.up_to_date(spec.id)
        # A caught-up fleet is the usual case: one query for every last materialization.
        materialized = last_materialized(context.instance, [spec for spec, _ in caught_up])
        now = time.time()
        for spec, watermark in caught_up:
            period = refresh_due(spec, materialized.get(spec.id), now)
            if period is not None:
                context.log.info("%s: caught up; refreshing its freshness", spec.id)
                wanted.append(WantedRun(spec, "refresh", f"{watermark}:{period}", shares=True))
        if wanted:
            # The newest runs of the silver queue, enough to hold each wanted pipeline's last.
            limit = max(100, 4 * len(wanted))
            newest = newest_runs(context.instance, {item.spec.id for item in wanted}, limit)
            requests, left_out = run_requests(
                wanted,
                newest,
                max_pipelines_per_run=max_pipelines_per_run,
                parallel_runs=silver_run_slots(context.instance),
            )
            for pipeline_id, why in left_out:
                reason.held_back(pipeline_id, why)
            if requests:
                return dg.SensorResult(run_requests=requests)
        return dg.SensorResult(skip_reason=dg.SkipReason(reason.text()))

    return _incremental_sensor
