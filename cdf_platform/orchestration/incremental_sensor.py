"""`incremental_sensor`: run silver as soon as its bronze table has new versions.

Each tick compares every pipeline's watermark with its bronze table's latest version from the
logs alone (no Spark, well under a second per pipeline) and requests `incremental_job` for the
pipelines that are behind, one run per pipeline and bronze version (run key
`incremental:<pipeline>:<latest version>`), and only for a pipeline with no run pending (queued
or in progress, found by its `cdf_platform/pipeline_id` tag): that run covers every version up
to the latest at its start, so the queue holds at most one run per pipeline however fast bronze
commits. Runs of one pipeline never overlap: its silver asset
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

import time

import dagster as dg

from cdf_platform.core.errors import CdfPlatformError, TableNameNotLocated
from cdf_platform.core.spec import FallbackMode, PipelineSpec
from cdf_platform.orchestration.jobs import INCREMENTAL_JOB
from cdf_platform.orchestration.keys import PIPELINE_TAG, silver_key
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


def _request(spec: PipelineSpec, reason: str, key: str) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"{reason}:{spec.id}:{key}",
        asset_selection=[silver_key(spec.id)],
        tags={PIPELINE_TAG: spec.id},
    )


def pending_pipelines(instance: dg.DagsterInstance, pipeline_ids: list[str]) -> dict[str, str]:
    """Pipeline id -> the id of one of its runs not finished yet (queued, starting, running or
    canceling; one query for every pipeline), for the pipelines among `pipeline_ids` that
    have one: each has its run pending, and no other is requested for it."""
    if not pipeline_ids:
        return {}
    runs = instance.get_run_records(
        dg.RunsFilter(statuses=PENDING_STATUSES, tags={PIPELINE_TAG: pipeline_ids})
    )
    return {
        str(record.dagster_run.tags[PIPELINE_TAG]): record.dagster_run.run_id for record in runs
    }


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
        minimum_interval_seconds=60,
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
        requests: list[dg.RunRequest] = []
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
                requests.append(_request(spec, "locate", "first"))
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
                requests.append(_request(spec, "repair", f"{watermark}:{latest}"))
                continue
            if status.state is WindowState.SPEC_CHANGED:
                # The edited spec's run reconciles silver (or, FAIL_FAST, refuses and says so):
                # one request per spec fingerprint, whether bronze moved or not.
                context.log.info("%s: spec edited (%s)", spec.id, status.problem)
                requests.append(_request(spec, "spec", str(status.spec_fingerprint)))
                continue
            if watermark is None or latest > watermark:
                context.log.info(
                    "%s: bronze at version %d, watermark %s", spec.id, latest, watermark
                )
                requests.append(_request(spec, "incremental", str(latest)))
                continue
            event = context.instance.get_latest_materialization_event(silver_key(spec.id))
            period = refresh_due(spec, event.timestamp if event else None, time.time())
            if period is not None:
                context.log.info("%s: caught up; refreshing its freshness", spec.id)
                requests.append(_request(spec, "refresh", f"{watermark}:{period}"))
        if requests:
            return dg.SensorResult(run_requests=requests)
        reason = "every silver table is up to date"
        if waiting:
            reason += f"; not run here: {', '.join(waiting)}"
        return dg.SensorResult(skip_reason=dg.SkipReason(reason))

    return _incremental_sensor
