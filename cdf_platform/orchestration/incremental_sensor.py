"""`incremental_sensor`: run silver as soon as its bronze table has new versions.

Each tick compares every pipeline's watermark with its bronze table's latest version from the
logs alone (no Spark, well under a second per pipeline) and requests `incremental_job` for the
pipelines that are behind, one run per pipeline and bronze version (run key
`incremental:<pipeline>:<latest version>`), and only for a pipeline with no run pending (queued
or in progress, found by its `cdf_platform/pipeline_id` tag, or failed and about to be retried
by Dagster's run retries): that run covers every version up to the latest at its start, so the
queue holds at most one run per pipeline however fast bronze commits. A run that died (its
process killed or lost, or the run canceled) is requested again on the next tick: the run key
then names the dead run (`...:after:<run id>`), so Dagster's run-key deduplication does not
drop it; a run that failed in its own code (a step failure) is not, since it would fail the same
way: the next bronze version, or a person, gets the next run. Runs of one pipeline never
overlap: its silver asset
holds the pipeline's pool (see `cdf_platform.orchestration.keys.pipeline_pool` for the
dagster.yaml limit). A pipeline whose window is lost is seen in the same tick: under
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
import time
from dataclasses import dataclass

import dagster as dg

from cdf_platform.core.errors import CdfPlatformError, TableNameNotLocated
from cdf_platform.core.spec import FallbackMode, PipelineSpec
from cdf_platform.orchestration.jobs import INCREMENTAL_JOB
from cdf_platform.orchestration.keys import (
    AUTO_RETRY_RUN_ID_TAG,
    FAILURE_REASON_TAG,
    PIPELINE_TAG,
    PRIORITY_TAG,
    WILL_RETRY_TAG,
    silver_key,
)
from cdf_platform.orchestration.resources import LakeLayout
from cdf_platform.orchestration.silver import freshness_window
from cdf_platform.planning.status import WindowState, pipeline_status

INCREMENTAL_SENSOR = "incremental_sensor"
# A run in one of these states is pending: it will still read the logs and apply what it finds.
PENDING_STATUSES = [
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
_NOT_OURS = (WindowState.SOURCE_MISSING, WindowState.BLOCKED)
# Dagster's failure reasons of a run that failed in its own code: a rerun at the same bronze
# version would fail the same way. Any other failure (the process killed or lost, a start
# timeout) is a run that died.
_FAILED_IN_ITS_CODE = frozenset({"STEP_FAILURE", "JOB_INITIALIZATION_FAILURE"})
# How long a failed run marked for Dagster's run retries counts as pending while its retry is
# not created yet (the retry daemon runs beside the sensors, within seconds).
_RETRY_WAIT = datetime.timedelta(hours=1)


@dataclass(frozen=True)
class _Wanted:
    """A run the tick wants for a pipeline: why, and the run key's subject."""

    spec: PipelineSpec
    reason: str
    key: str


def _request(wanted: _Wanted, instance: dg.DagsterInstance) -> dg.RunRequest:
    """The run request of `wanted`; its run key names the pipeline's newest run when that run
    died, so Dagster does not drop it as a duplicate of the dead run's request."""
    spec, run_key = wanted.spec, f"{wanted.reason}:{wanted.spec.id}:{wanted.key}"
    dead = died_run(instance, spec.id)
    if dead is not None:
        run_key += f":after:{dead[:8]}"
    tags = {PIPELINE_TAG: spec.id}
    if wanted.reason == "repair":
        tags[PRIORITY_TAG] = "1"  # a lost window goes first in the queue
    return dg.RunRequest(run_key=run_key, asset_selection=[silver_key(spec.id)], tags=tags)


def died_run(instance: dg.DagsterInstance, pipeline_id: str) -> str | None:
    """The id of the pipeline's newest run if that run died (failed, but not in its own code)
    or was canceled, else None."""
    records = instance.get_run_records(dg.RunsFilter(tags={PIPELINE_TAG: pipeline_id}), limit=1)
    if not records:
        return None
    run = records[0].dagster_run
    died = run.status is dg.DagsterRunStatus.FAILURE and (
        run.tags.get(FAILURE_REASON_TAG) not in _FAILED_IN_ITS_CODE
    )
    return run.run_id if died or run.status is dg.DagsterRunStatus.CANCELED else None


def pending_pipelines(instance: dg.DagsterInstance, pipeline_ids: list[str]) -> dict[str, str]:
    """Pipeline id -> the id of one of its runs not finished yet (queued, starting, running or
    canceling), or failed and marked for Dagster's run retries whose retry is not created yet,
    for the pipelines among `pipeline_ids` that have one (two queries for every pipeline):
    each has its run pending, and no other is requested for it."""
    if not pipeline_ids:
        return {}
    runs = instance.get_run_records(
        dg.RunsFilter(statuses=PENDING_STATUSES, tags={PIPELINE_TAG: pipeline_ids})
    )
    retrying = instance.get_run_records(
        dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.FAILURE],
            tags={PIPELINE_TAG: pipeline_ids, WILL_RETRY_TAG: "true"},
            updated_after=datetime.datetime.now(datetime.UTC) - _RETRY_WAIT,
        )
    )
    pending = [
        *(r.dagster_run for r in retrying if AUTO_RETRY_RUN_ID_TAG not in r.dagster_run.tags),
        *(r.dagster_run for r in runs),
    ]
    return {str(run.tags[PIPELINE_TAG]): run.run_id for run in pending}


def refresh_due(spec: PipelineSpec, last_materialized: float | None, now: float) -> int | None:
    """The refresh period number when a caught-up silver asset is due for a refresh (its last
    materialization is half its freshness window old, or it has none), else None."""
    half = freshness_window(spec).total_seconds() / 2
    if last_materialized is not None and now - last_materialized < half:
        return None
    return int(now // half)


def build_incremental_sensor(
    specs: list[PipelineSpec], *, running: bool = True
) -> dg.SensorDefinition:
    """The incremental sensor over the pipelines `specs`, RUNNING from the start unless
    `running` is False."""

    @dg.sensor(
        name=INCREMENTAL_SENSOR,
        job_name=INCREMENTAL_JOB,
        minimum_interval_seconds=30,
        description="Requests a silver run when its bronze table has versions after the watermark.",
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
        wanted: list[_Wanted] = []
        waiting: list[str] = []
        pending = pending_pipelines(context.instance, [spec.id for spec in specs])
        for spec in specs:
            if spec.id in pending:
                # Its queued or running run covers every version up to the latest at its start.
                waiting.append(f"{spec.id} (run {pending[spec.id][:8]} pending)")
                continue
            try:
                status = pipeline_status(spec, control)
            except (CdfPlatformError, NotImplementedError) as err:
                # One unreadable pipeline (e.g. a remote table the JVM-free log reader does not
                # read yet) must not stop the others from being triggered.
                context.log.warning("%s: cannot read its status: %s", spec.id, err)
                code = getattr(err, "incident_code", type(err).__name__)
                waiting.append(f"{spec.id} ({code})")
                continue
            if status.problem_code == TableNameNotLocated.incident_code:
                # Only a run can ask Spark's catalog where a named table lives: one run locates
                # it, and from then on this sensor reads its log like any other.
                wanted.append(_Wanted(spec, "locate", "first"))
                continue
            if status.state in _NOT_OURS:
                waiting.append(f"{spec.id} ({status.state.value})")
                continue
            latest, watermark = status.latest_version, status.watermark
            if latest is None:
                continue
            if status.state is WindowState.LOST:
                if spec.fallback_mode is FallbackMode.FAIL_FAST:
                    waiting.append(f"{spec.id} (LOST, FAIL_FAST: left for a person)")
                    continue
                # Seen in this tick: the run's plan meets the loss and rebuilds (its fallback),
                # once per loss; the checks still record it.
                context.log.warning("%s: replay window lost (%s)", spec.id, status.problem_code)
                wanted.append(_Wanted(spec, "repair", f"{watermark}:{latest}"))
                continue
            if status.state is WindowState.SPEC_CHANGED:
                # The edited spec's run reconciles silver (or, FAIL_FAST, refuses and says so):
                # one request per spec fingerprint, whether bronze moved or not.
                context.log.info("%s: spec edited (%s)", spec.id, status.problem)
                wanted.append(_Wanted(spec, "spec", str(status.spec_fingerprint)))
                continue
            if watermark is None or latest > watermark:
                context.log.info(
                    "%s: bronze at version %d, watermark %s", spec.id, latest, watermark
                )
                wanted.append(_Wanted(spec, "incremental", str(latest)))
                continue
            event = context.instance.get_latest_materialization_event(silver_key(spec.id))
            period = refresh_due(spec, event.timestamp if event else None, time.time())
            if period is not None:
                context.log.info("%s: caught up; refreshing its freshness", spec.id)
                wanted.append(_Wanted(spec, "refresh", f"{watermark}:{period}"))
        if wanted:
            requests = [_request(item, context.instance) for item in wanted]
            return dg.SensorResult(run_requests=requests)
        reason = "every silver table is up to date"
        if waiting:
            reason += f"; not run here: {', '.join(waiting)}"
        return dg.SensorResult(skip_reason=dg.SkipReason(reason))

    return _incremental_sensor
