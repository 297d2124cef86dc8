"""What runs tell the alert sensor (`alert_signals`), and the lost-window signal that a repair
run, a check evaluation and a rebuild's materialization all open:

- A run the sensors requested to repair a loss starts: the window is lost (if no evaluation said
  so yet: the incremental sensor repairs from the tick that sees a loss, before any check) and
  its repair started.
- A run failed with no retry left (Dagster's run retries will not take it): failed for good,
  or a destructive action refused (a run failed by a blocking check is not: its evaluation is
  told); a run that carried out a destructive setting the deployment permits (run tag
  `DESTRUCTIVE_TAG`) ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEventType

from cdf_platform.alerts.incidents import Change, Signal
from cdf_platform.core.alert_config import AlertEvent, Severity
from cdf_platform.core.errors import DestructiveActionNotPermitted
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.sensors.incremental_sensor import requested_of
from cdf_platform.orchestration.shared.keys import (
    DESTRUCTIVE_TAG,
    INCIDENT_TAG,
    PIPELINE_TAG,
    TABLE_TAG,
    WILL_RETRY_TAG,
    silver_op_name,
    silver_pipeline_ids,
)
from cdf_platform.planning.repair import repair_decision

# The class of a step failure that a failed blocking check causes.
CHECK_FAILED = "DagsterAssetCheckFailedError"
# The run events the alert sensor reads.
RUN_EVENT_TYPES = (
    DagsterEventType.RUN_START,
    DagsterEventType.RUN_SUCCESS,
    DagsterEventType.RUN_FAILURE,
)


def lost_window(
    specs: Mapping[str, PipelineSpec],
    subject: str,
    summary: str,
    figures: dict[str, Any],
    link: str,
    at: float,
    source: str,
) -> Signal:
    """The lost window of `subject` opened, with what to do: nothing, if the platform repairs
    it; a rebuild by a person, if the pipeline is FAIL_FAST."""
    spec = specs.get(subject)
    # The one decision on a lost window (planning.repair): a person's, or the platform's.
    if spec is not None and not repair_decision(spec.fallback_mode).automatic:
        advice = (
            f"{subject} is FAIL_FAST: read the incident, then rebuild it (`cdf-platform "
            f"rebuild {subject}`, or rebuild_job with override_fail_fast: true)"
        )
    else:
        advice = "nothing: the platform rebuilds silver from bronze's snapshot (a repair follows)"
    return Signal(
        AlertEvent.WINDOW_LOST,
        subject,
        Change.OPEN,
        Severity.CRITICAL,
        summary,
        advice,
        figures,
        link,
        at,
        source,
    )


def run_started(
    specs: Mapping[str, PipelineSpec], run: dg.DagsterRun, at: float, source: str
) -> list[Signal]:
    """What a starting run tells: each loss it was requested to repair, lost and its repair
    started."""
    repairs = {
        pipeline_id: requested.split(":")[1:]
        for pipeline_id, requested in requested_of(run).items()
        if requested.startswith("repair:")
    }
    if INCIDENT_TAG in run.tags and PIPELINE_TAG in run.tags:
        repairs.setdefault(run.tags[PIPELINE_TAG], [])
    signals = []
    for subject, versions in sorted(repairs.items()):
        figures: dict[str, Any] = (
            {"watermark": versions[0], "latest_version": versions[1]} if len(versions) == 2 else {}
        )
        summary = f"{subject}'s replay window is lost" + (
            f": bronze versions after {versions[0]} can no longer be replayed"
            if versions
            else f" ({run.tags.get(INCIDENT_TAG)})"
        )
        link = f"/runs/{run.run_id}"
        signals.append(lost_window(specs, subject, summary, figures, link, at, source))
        signals.append(
            Signal(
                AlertEvent.REPAIR_STARTED,
                subject,
                Change.ONCE,
                Severity.INFO,
                f"run {run.run_id} rebuilds {subject} from bronze's snapshot",
                None,
                figures,
                link,
                at,
                f"{source}:{subject}",
            )
        )
    return signals


def run_ended(
    specs: Mapping[str, PipelineSpec],
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    failed: bool,
    at: float,
    source: str,
) -> list[Signal]:
    """What an ending run tells: a destructive setting it carried out; if it failed with no
    retry left, the failure (`_run_failed`)."""
    link = f"/runs/{run.run_id}"
    signals = []
    # A maintenance run is one table's: its subject names it.
    table = run.tags.get(TABLE_TAG)
    subject = f"{run.job_name} ({table})" if table else run.job_name
    if DESTRUCTIVE_TAG in run.tags:
        settings = run.tags[DESTRUCTIVE_TAG]
        signals.append(
            Signal(
                AlertEvent.DESTRUCTIVE_ACTION,
                subject,
                Change.ONCE,
                Severity.WARNING,
                f"run {run.run_id} of {run.job_name} carried out {settings}, which this "
                f"deployment permits; it {'failed' if failed else 'succeeded'}",
                "nothing, if it was intended: the maintenance log records it",
                {},
                link,
                at,
                source,
                title="destructive action permitted",
            )
        )
    if not failed or run.tags.get(WILL_RETRY_TAG) == "true":
        return signals
    return [*signals, *_run_failed(specs, instance, run, subject, link, at, source)]


def _run_failed(
    specs: Mapping[str, PipelineSpec],
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    subject: str,
    link: str,
    at: float,
    source: str,
) -> list[Signal]:
    """What a run that failed for good tells: a refused destructive action, or each failed
    pipeline's run failure; nothing when only blocking checks failed (their evaluations
    tell)."""
    failures = instance.all_logs(run.run_id, of_type=DagsterEventType.STEP_FAILURE)
    errors = [
        error
        for failure in failures
        if failure.dagster_event is not None
        and (error := failure.dagster_event.step_failure_data.error) is not None
    ]
    if errors and all(error.cls_name == CHECK_FAILED for error in errors):
        return []  # a blocking check failed: its evaluation is told
    messages = [error.message.strip() for error in errors]
    message = messages[0].splitlines()[0] if messages else "the run's process ended"
    if any(
        DestructiveActionNotPermitted.incident_code in m
        or DestructiveActionNotPermitted.__name__ in m
        for m in messages
    ):
        return [
            Signal(
                AlertEvent.DESTRUCTIVE_ACTION,
                subject,
                Change.ONCE,
                Severity.WARNING,
                message,
                "nothing, if the refusal is right; otherwise see docs/production.md "
                "(Security) for who may permit it",
                {},
                link,
                at,
                source,
                title="destructive action refused",
            )
        ]
    # A shared run's failure is its failed steps' pipelines (the others wrote silver); a
    # run whose process died is all it covers.
    failed_steps = {failure.step_key for failure in failures}
    covered = silver_pipeline_ids(run.asset_selection or ())
    subjects = [p for p in specs if silver_op_name(p) in failed_steps] or covered
    subjects = subjects or [run.tags.get(PIPELINE_TAG) or run.job_name]
    return [
        Signal(
            AlertEvent.RUN_FAILED,
            pipeline,
            Change.OPEN,
            Severity.CRITICAL,
            f"run {run.run_id} of {run.job_name} failed, and no retry is left: {message}",
            "read the run's error (its 'What to do' names the fix); the next bronze "
            "version gets a run of its own",
            {},
            link,
            at,
            source,
        )
        for pipeline in subjects
    ]
