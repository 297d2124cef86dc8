"""`rebuild_sensor`: repair a lost replay window without a person.

It reads the latest `replay_window` evaluation of every silver asset from the instance. Check
evaluations are the signal, not run failures: a failed check does not fail its run, so a
run-failure sensor would never see a lost window. For each new evaluation that says LOST it
requests `rebuild_job` for that pipeline, once per loss:

- the cursor remembers the last evaluation handled per pipeline, so a tick only looks at newer
  evaluations;
- the run key `rebuild:<pipeline>:<watermark>:<latest version>` names the loss, so a later
  evaluation of the same loss (the checks schedule runs again before the rebuild) is
  deduplicated by Dagster.

FAIL_FAST pipelines are never rebuilt automatically: the sensor names them in its skip reason on
every tick while their latest evaluation says LOST, and waits for a person (who runs
`rebuild_job` with `override_fail_fast: true`). A rebuild that fails is not
retried blindly either: it is retried only for a new loss (the watermark or bronze moved).
"""

import json

import dagster as dg

from cdf_platform.core.spec import FallbackMode, PipelineSpec
from cdf_platform.orchestration.checks import REPLAY_WINDOW
from cdf_platform.orchestration.jobs import REBUILD_JOB, rebuild_run_config
from cdf_platform.orchestration.keys import INCIDENT_TAG, PIPELINE_TAG, silver_key
from cdf_platform.planning.status import WindowState

REBUILD_SENSOR = "rebuild_sensor"


def _read_cursor(cursor: str | None) -> dict[str, int]:
    if not cursor:
        return {}
    return {str(key): int(value) for key, value in json.loads(cursor).items()}


def _figure(evaluation: dg.AssetCheckEvaluation, name: str) -> object:
    value = evaluation.metadata.get(name)
    return value.value if value is not None else None


def rebuild_run_key(pipeline_id: str, watermark: object, latest_version: object) -> str:
    """The run key of the rebuild that repairs one loss."""
    return f"rebuild:{pipeline_id}:{watermark}:{latest_version}"


def build_rebuild_sensor(specs: list[PipelineSpec], *, running: bool = True) -> dg.SensorDefinition:
    """The rebuild sensor over the pipelines `specs`."""

    @dg.sensor(
        name=REBUILD_SENSOR,
        job_name=REBUILD_JOB,
        minimum_interval_seconds=60,
        description="Requests rebuild_job once per lost replay window, read from the latest "
        "replay_window check evaluations (FAIL_FAST pipelines are left for a person).",
        # Self-repair is the product: on from the start unless turned off ($CDF_AUTOMATION).
        default_status=dg.DefaultSensorStatus.RUNNING
        if running
        else dg.DefaultSensorStatus.STOPPED,
    )
    def _rebuild_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        """One run request per pipeline whose newest replay_window evaluation says LOST."""
        handled = _read_cursor(context.cursor)
        requests: list[dg.RunRequest] = []
        left_for_a_person: list[str] = []
        for spec in specs:
            check_key = dg.AssetCheckKey(silver_key(spec.id), REPLAY_WINDOW)
            record = context.instance.get_latest_asset_check_evaluation_record(check_key)
            evaluation = record.evaluation if record is not None else None
            if record is None or not isinstance(evaluation, dg.AssetCheckEvaluation):
                continue  # never evaluated, or planned in a run still in progress: next tick
            is_new = record.id > handled.get(spec.id, -1)
            handled[spec.id] = record.id
            if evaluation.passed or _figure(evaluation, "state") != WindowState.LOST.value:
                continue
            problem_code = str(_figure(evaluation, "problem_code"))
            if spec.fallback_mode is FallbackMode.FAIL_FAST:
                # An open incident: named on every tick until a person rebuilds or the check passes.
                left_for_a_person.append(spec.id)
                if is_new:
                    context.log.warning(
                        "%s lost its replay window (%s) but is FAIL_FAST: not rebuilding; run %s "
                        "with override_fail_fast once a person has decided",
                        spec.id,
                        problem_code,
                        REBUILD_JOB,
                    )
                continue
            if not is_new:
                continue
            run_key = rebuild_run_key(
                spec.id, _figure(evaluation, "watermark"), _figure(evaluation, "latest_version")
            )
            context.log.info(
                "%s lost its replay window (%s): requesting %s", spec.id, problem_code, run_key
            )
            requests.append(
                dg.RunRequest(
                    run_key=run_key,
                    asset_selection=[silver_key(spec.id)],
                    run_config=rebuild_run_config(spec.id),
                    tags={PIPELINE_TAG: spec.id, INCIDENT_TAG: problem_code},
                )
            )
        cursor = json.dumps(handled, sort_keys=True)
        if requests:
            return dg.SensorResult(run_requests=requests, cursor=cursor)
        reason = "no new replay_window loss"
        if left_for_a_person:
            reason += f"; FAIL_FAST pipelines left for a person: {', '.join(left_for_a_person)}"
        return dg.SensorResult(skip_reason=dg.SkipReason(reason), cursor=cursor)

    return _rebuild_sensor
