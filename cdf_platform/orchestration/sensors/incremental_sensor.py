"""`incremental_sensor`: run silver as soon as its bronze table has new versions.

Each tick compares every pipeline's watermark with its bronze table's latest version from the
logs alone (no Spark, well under a second per pipeline; a caught-up pipeline whose two logs list
as at its last assessment is not read again: `cdf_platform.planning.caught_up`) and requests
`incremental_job` for the pipelines that are behind, and only for a pipeline with no run
pending (a run covering its silver asset that is queued or in progress, whoever launched it, or
failed and about to be retried by Dagster's run retries): that run covers every version up to
the latest at its start, so the queue holds at most one run per pipeline however fast bronze
commits.

Pipelines whose runs are small (an incremental run over at most SMALL_CHANGE_BYTES of change
files, an initial load of a snapshot that small, or a refresh) share runs of at most
`CDF_PIPELINES_PER_RUN` pipelines (run key `batch:<hash of what each was asked>`): one process
and one Spark driver apply them all, each its own step with its own watermark, pool and
failure, so a fleet's onboarding or catch-up pays a driver start per batch, not per pipeline.
While the silver queue is full (a run waits behind busy slots: `silver_queue_full`),
the pipelines that would share a run wait for it to move, then share the next run: a queue of
small runs, each paying its launch and its events, drains slower than commits come.
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

Every decision above is `cdf_platform.planning.run_requests`' (JVM-free and Dagster-free, on
plain values); this module reads Dagster's runs and records for it, reduces each run to a
`SilverRun` (`silver_run`), and turns the runs it plans into run requests (`run_request`).
"""

import datetime
import time

import dagster as dg

from cdf_platform.core.config import DEFAULT_PIPELINES_PER_RUN
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.jobs.silver_jobs import INCREMENTAL_JOB, REBUILD_JOB
from cdf_platform.orchestration.sensors.sensor_instance import EvaluationInstance, TickLog
from cdf_platform.orchestration.sensors.sensor_stop import STOPPED_REASON, stopped
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
from cdf_platform.planning.caught_up import CaughtUpMemo
from cdf_platform.planning.run_requests import (
    DECISION_WAIT,
    RETRY_WAIT,
    CaughtUp,
    HeldBack,
    PlannedRun,
    SilverRun,
    WantedRun,
    parse_requested,
    pending_runs,
    queue_full,
    refresh_due,
    run_fate,
    run_requests,
    run_slots,
)

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
# The platform's jobs whose run without an asset selection writes every silver table.
_WRITE_ALL_SILVER = frozenset({INCREMENTAL_JOB, REBUILD_JOB})


def _covered(run: dg.DagsterRun, pipeline_ids: set[str]) -> set[str]:
    """The pipelines among `pipeline_ids` whose silver `run` writes: those of its asset
    selection, or every one for a run of a whole platform job."""
    if run.asset_selection is None:
        return set(pipeline_ids) if run.job_name in _WRITE_ALL_SILVER else set()
    return set(silver_pipeline_ids(run.asset_selection)) & pipeline_ids


def requested_of(run: dg.DagsterRun) -> dict[str, str]:
    """Pipeline id -> what the sensor requested of it in `run` (its REQUESTED_TAG)."""
    return parse_requested(run.tags.get(REQUESTED_TAG, ""))


def silver_run(run: dg.DagsterRun, pipeline_ids: set[str]) -> SilverRun:
    """`run` as the run decisions see it (`cdf_platform.planning.run_requests.SilverRun`): the
    pipelines among `pipeline_ids` it covers, how it ended (a step failure is failed in its own
    code unless the step marked it `RETRY_ON_STEP_FAILURE_TAG`: `mark_retryable_run`), what it
    was asked, and whether Dagster's run retries retried it."""
    fate = run_fate(
        failed=run.status is dg.DagsterRunStatus.FAILURE,
        canceled=run.status is dg.DagsterRunStatus.CANCELED,
        failure_reason=run.tags.get(FAILURE_REASON_TAG),
        marked_retryable=run.tags.get(RETRY_ON_STEP_FAILURE_TAG) == "true",
    )
    return SilverRun(
        run.run_id,
        frozenset(_covered(run, pipeline_ids)),
        fate,
        requested_of(run),
        retried=AUTO_RETRY_RUN_ID_TAG in run.tags,
    )


def newest_runs(
    instance: dg.DagsterInstance, pipeline_ids: set[str], limit: int
) -> dict[str, SilverRun]:
    """Pipeline id -> the newest silver run that covered it, among the `limit` newest runs of
    the silver queue (one query); a pipeline none of them covered is left out."""
    records = instance.get_run_records(dg.RunsFilter(tags={QUEUE_TAG: SILVER_QUEUE}), limit=limit)
    newest: dict[str, SilverRun] = {}
    for record in records:  # newest first
        run = silver_run(record.dagster_run, pipeline_ids)
        for pipeline_id in run.covers:
            newest.setdefault(pipeline_id, run)
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
            for record in _failed(instance, {QUEUE_TAG: SILVER_QUEUE}, DECISION_WAIT)
            if WILL_RETRY_TAG not in record.dagster_run.tags
        ]
        if instance.run_retries_enabled  # else no run is ever decided on
        else []
    )
    retrying = _failed(instance, {QUEUE_TAG: SILVER_QUEUE, WILL_RETRY_TAG: "true"}, RETRY_WAIT)
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
    records = [*runs, *retrying, *undecided]
    return pending_runs(silver_run(record.dagster_run, pipeline_ids) for record in records)


def _failed(
    instance: dg.DagsterInstance, tags: dict[str, str], within: datetime.timedelta
) -> list[dg.RunRecord]:
    """The failed runs carrying `tags` last updated `within` ago or less."""
    since = datetime.datetime.now(datetime.UTC) - within
    filters = dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE], tags=tags, updated_after=since)
    return list(instance.get_run_records(filters))


def silver_queue_full(instance: dg.DagsterInstance) -> bool:
    """Whether the instance's silver queue is full (`queue_full`): its silver runs in flight
    are more than its silver slots, so one waits behind busy slots already; False when the
    instance sets no limit on silver runs (then no query)."""
    slots = silver_run_slots(instance)
    if slots is None:
        return False
    filters = dg.RunsFilter(statuses=PENDING_STATUSES, tags={QUEUE_TAG: SILVER_QUEUE})
    return queue_full(slots, len(instance.get_run_records(filters)))


def silver_run_slots(instance: dg.DagsterInstance) -> int | None:
    """How many silver runs `instance` runs at once: the lowest of its run queue's limits that
    apply to runs tagged `cdf_platform/queue: silver` (a limit on that tag and value, on the
    tag whatever its value, or on all runs); None when none applies (no queued run
    coordinator, or no limit)."""
    config = instance.get_concurrency_config().run_queue_config
    if config is None:
        return None
    rules = config.tag_concurrency_limits or ()
    return run_slots(config.max_concurrent_runs, rules, tag=QUEUE_TAG, value=SILVER_QUEUE)


def run_request(planned: PlannedRun) -> dg.RunRequest:
    """The Dagster run request of a run a tick plans: its silver assets, what it asks of each
    pipeline (REQUESTED_TAG), a lone pipeline's tag, and a repair's place first in the queue."""
    tags = {REQUESTED_TAG: planned.requested}
    if planned.pipeline_id is not None:
        tags[PIPELINE_TAG] = planned.pipeline_id
    if planned.first_in_queue:
        tags[PRIORITY_TAG] = "1"
    return dg.RunRequest(
        run_key=planned.run_key,
        asset_selection=[silver_key(pipeline_id) for pipeline_id in planned.pipeline_ids],
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


class MaterializedTimes:
    """Pipeline id -> its silver asset's last materialization time as last read, kept by one
    incremental sensor between the ticks of a code-server process, so that a caught-up fleet
    does not read every silver asset's last materialization event on every tick.

    A materialization's time only grows: a pipeline whose known time puts its refresh in the
    future (`refresh_due`) is not due whatever happened since, and needs no read. Only the
    pipelines that look due (or are unknown: a new process, a new pipeline) are read, and those
    reads update the times. The times are of one instance (the daemon's, opened once:
    `EvaluationInstance`): an evaluation against another instance starts them afresh.

    Example:
        >>> MaterializedTimes().known
        {}
    """

    def __init__(self) -> None:
        self.known: dict[str, float] = {}
        self._of: dg.DagsterInstance | None = None  # the instance `known` is of

    def due(
        self, instance: dg.DagsterInstance, caught_up: list[tuple[PipelineSpec, int]]
    ) -> list[tuple[PipelineSpec, int, int]]:
        """(spec, watermark, refresh period) of the `caught_up` pipelines due for a refresh."""
        if instance is not self._of:  # another instance: nothing known of it
            self.known, self._of = {}, instance
        now = time.time()
        looks_due = [
            spec
            for spec, _ in caught_up
            if refresh_due(spec, self.known.get(spec.id), now) is not None
        ]
        self.known.update(last_materialized(instance, looks_due))
        due = []
        for spec, watermark in caught_up:
            period = refresh_due(spec, self.known.get(spec.id), now)
            if period is not None:
                due.append((spec, watermark, period))
        return due


def build_incremental_sensor(
    specs: list[PipelineSpec],
    lake: LakeLayout,
    *,
    running: bool = True,
    max_pipelines_per_run: int = DEFAULT_PIPELINES_PER_RUN,
) -> dg.SensorDefinition:
    """The incremental sensor over the pipelines `specs` of `lake` (the definitions' `lake`
    resource, bound here rather than built for each evaluation), RUNNING from the start unless
    `running` is False; pipelines with small change sets share runs of at most
    `max_pipelines_per_run` pipelines."""
    pipeline_ids = {spec.id for spec in specs}
    materialized = MaterializedTimes()
    instances = EvaluationInstance()
    decisions = CaughtUpMemo()

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
        context: dg.SensorEvaluationContext,
    ) -> dg.SensorResult:
        """One run request per pipeline whose bronze table moved past the watermark (or whose
        names need locating, or whose caught-up silver is due for a refresh)."""
        instance = instances.of(context)
        log = TickLog(context)
        if stopped(context, instance, INCREMENTAL_SENSOR):
            return dg.SensorResult(skip_reason=dg.SkipReason(STOPPED_REASON))
        control = lake.control()
        # Read once for the tick: each read returns every pipeline's row.
        reads = ControlReads.of(control, verified=False)  # no foreign-write search here
        wanted: list[WantedRun] = []
        reason = TickReason(len(specs))
        caught_up: list[tuple[PipelineSpec, int]] = []
        pending = pending_pipelines(instance, pipeline_ids)
        for spec in specs:
            if spec.id in pending:
                # Its queued or running run covers every version up to the latest at its start.
                reason.in_progress(spec.id, pending[spec.id])
                continue
            decided = decisions.wanted_run(spec, control, reads, log)
            if isinstance(decided, WantedRun):
                wanted.append(decided)
            elif isinstance(decided, HeldBack):
                reason.held_back(spec.id, decided.why)
            elif isinstance(decided, CaughtUp):
                caught_up.append((spec, decided.watermark))
                reason.up_to_date(spec.id)
        # A caught-up fleet is the usual case: at most one query, for the pipelines whose
        # refresh may be due by the times read before.
        for spec, watermark, period in materialized.due(instance, caught_up):
            log.info("%s: caught up; refreshing its freshness", spec.id)
            wanted.append(WantedRun(spec, "refresh", f"{watermark}:{period}", shares=True))
        if wanted:
            # The newest runs of the silver queue, enough to hold each wanted pipeline's last.
            limit = max(100, 4 * len(wanted))
            newest = newest_runs(instance, {item.spec.id for item in wanted}, limit)
            planned, left_out = run_requests(
                wanted,
                newest,
                max_pipelines_per_run=max_pipelines_per_run,
                queue_full=silver_queue_full(instance),
            )
            for pipeline_id, why in left_out:
                reason.held_back(pipeline_id, why)
            if planned:
                return dg.SensorResult(run_requests=[run_request(run) for run in planned])
        return dg.SensorResult(skip_reason=dg.SkipReason(reason.text()))

    return _incremental_sensor
