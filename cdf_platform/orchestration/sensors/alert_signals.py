"""What the alert sensor sees in the instance's events, as `Signal`s
(`cdf_platform.alerts.incidents`): check evaluations, silver materializations, verification
observations, and runs starting, failing and succeeding.

- `replay_window` says `LOW_HEADROOM`: the window is at risk; `LOST`: it is lost; passed: neither.
- A run the sensors requested to repair a loss starts: the window is lost (if no evaluation said
  so yet: the incremental sensor repairs from the tick that sees a loss, before any check) and
  its repair started.
- A silver materialization of a rebuild that names a loss: repaired. Any silver
  materialization: its pipeline's runs succeed again.
- `foreign_writes` failed / passed; an expectation check's quarantine above
  `quarantine_rows_above` / within it; a verification DIFFERENT / EQUAL or REPAIRED.
- A run failed with no retry left (Dagster's run retries will not take it): failed for good,
  or a destructive action refused (a run failed by a blocking check is not: its evaluation is
  told); a run that carried out a destructive setting the deployment
  permits (run tag `DESTRUCTIVE_TAG`) ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEventType

from cdf_platform.alerts.incidents import Change, Signal
from cdf_platform.core.alert_config import AlertEvent, Severity
from cdf_platform.core.errors import REBUILDABLE, DestructiveActionNotPermitted
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.checks.silver_checks import FOREIGN_WRITES, REPLAY_WINDOW
from cdf_platform.orchestration.sensors.incremental_sensor import requested_of
from cdf_platform.orchestration.shared.keys import (
    DESTRUCTIVE_TAG,
    INCIDENT_TAG,
    PIPELINE_TAG,
    SILVER_PREFIX,
    TABLE_TAG,
    WILL_RETRY_TAG,
    silver_op_name,
    silver_pipeline_ids,
)
from cdf_platform.planning.repair import repair_decision

# The incident codes of a loss a rebuild repairs (a spec edit's or a person's rebuild is none).
LOSS_CODES = frozenset(cls.incident_code for cls in REBUILDABLE)
# The class of a step failure that a failed blocking check causes.
CHECK_FAILED = "DagsterAssetCheckFailedError"
# The asset events and run events the sensor reads (besides the checks' evaluations).
ASSET_EVENT_TYPES = (DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION)
RUN_EVENT_TYPES = (
    DagsterEventType.RUN_START,
    DagsterEventType.RUN_SUCCESS,
    DagsterEventType.RUN_FAILURE,
)


def _value(metadata: Mapping[str, Any], name: str) -> Any:
    item = metadata.get(name)
    return getattr(item, "value", item)


def _subject(key: dg.AssetKey) -> str:
    if len(key.path) == 2 and key.path[0] == SILVER_PREFIX:
        return key.path[1]
    return key.to_user_string()


def _asset_page(key: dg.AssetKey, view: str | None = None) -> str:
    return f"/assets/{'/'.join(key.path)}" + (f"?view={view}" if view else "")


@dataclass(frozen=True)
class SignalReader:
    """Turns event records into signals, knowing the pipelines' fallback modes and the
    quarantine limit."""

    specs: Mapping[str, PipelineSpec]
    quarantine_rows_above: int = 0

    def signals(
        self, instance: dg.DagsterInstance, entry: dg.EventLogEntry, source: str
    ) -> list[Signal]:
        """The signals one event gives (none for most); `source`: a name unique to it."""
        event = entry.dagster_event
        if event is None:
            return []
        at = entry.timestamp
        kind = event.event_type
        if kind is DagsterEventType.ASSET_CHECK_EVALUATION:
            return self._evaluation(event.asset_check_evaluation_data, at, source)
        if kind is DagsterEventType.ASSET_MATERIALIZATION:
            return self._materialization(
                event.step_materialization_data.materialization, entry.run_id, at, source
            )
        if kind is DagsterEventType.ASSET_OBSERVATION:
            return self._observation(
                event.asset_observation_data.asset_observation, entry.run_id, at, source
            )
        run = instance.get_run_by_id(entry.run_id)
        if run is None:
            return []
        if kind is DagsterEventType.RUN_START:
            return self._run_start(run, at, source)
        return self._run_end(instance, run, kind is DagsterEventType.RUN_FAILURE, at, source)

    # -- check evaluations -------------------------------------------------------------
    def _evaluation(self, evaluation: Any, at: float, source: str) -> list[Signal]:
        key, metadata = evaluation.asset_key, evaluation.metadata
        subject, link = _subject(key), _asset_page(key, "checks")
        description = evaluation.description or ""
        if evaluation.check_name == REPLAY_WINDOW:
            return self._window(evaluation, subject, link, at, source)
        if evaluation.check_name == FOREIGN_WRITES:
            severity = (
                Severity.CRITICAL
                if evaluation.severity == dg.AssetCheckSeverity.ERROR
                else Severity.WARNING
            )
            change = Change.CLEAR if evaluation.passed else Change.OPEN
            return [
                Signal(
                    AlertEvent.FOREIGN_WRITE,
                    subject,
                    change,
                    severity,
                    description,
                    "find who wrote to silver and stop them, then `cdf-platform verify "
                    f"--pipeline {subject}` (add `--repair` to reconcile the keys it names)",
                    {},
                    link,
                    at,
                    source,
                )
            ]
        held = _value(metadata, "quarantined_rows")
        if held is None:
            return []
        above = int(held) > self.quarantine_rows_above
        return [
            Signal(
                AlertEvent.QUARANTINE,
                subject,
                Change.OPEN if above else Change.CLEAR,
                Severity.WARNING,
                f"the quarantine of rule {_value(metadata, 'rule')} holds {held} row(s) "
                f"(alert above {self.quarantine_rows_above})",
                "look at the quarantined rows (docs/expectations.md), fix them at the source "
                "or the rule; they are applied when fixed bronze rows arrive",
                {"quarantined_rows": int(held)},
                link,
                at,
                source,
            )
        ]

    def _window(
        self, evaluation: Any, subject: str, link: str, at: float, source: str
    ) -> list[Signal]:
        metadata = evaluation.metadata
        state = _value(metadata, "state")
        figures = {
            name: _value(metadata, name)
            for name in ("headroom_hours", "watermark", "latest_version", "limit")
            if _value(metadata, name) is not None
        }
        description = evaluation.description or ""
        if evaluation.passed:
            return [
                Signal(
                    AlertEvent.WINDOW_AT_RISK,
                    subject,
                    Change.CLEAR,
                    Severity.WARNING,
                    description,
                    None,
                    figures,
                    link,
                    at,
                    source,
                ),
                Signal(
                    AlertEvent.WINDOW_LOST,
                    subject,
                    Change.CLEAR,
                    Severity.CRITICAL,
                    f"the replay window is whole again: {description}",
                    None,
                    figures,
                    link,
                    at,
                    source,
                ),
            ]
        if state == "LOW_HEADROOM":
            return [
                Signal(
                    AlertEvent.WINDOW_AT_RISK,
                    subject,
                    Change.OPEN,
                    Severity.WARNING,
                    description,
                    f"run {subject} now (are its runs failing, its sensor stopped?); if it "
                    "cannot run, raise delta.deletedFileRetentionDuration on its bronze table",
                    figures,
                    link,
                    at,
                    source,
                )
            ]
        if state == "LOST":
            return [self._lost(subject, description, figures, link, at, source)]
        return []

    def _lost(
        self,
        subject: str,
        summary: str,
        figures: dict[str, Any],
        link: str,
        at: float,
        source: str,
    ) -> Signal:
        spec = self.specs.get(subject)
        # The one decision on a lost window (planning.repair): a person's, or the platform's.
        if spec is not None and not repair_decision(spec.fallback_mode).automatic:
            advice = (
                f"{subject} is FAIL_FAST: read the incident, then rebuild it (`cdf-platform "
                f"rebuild {subject}`, or rebuild_job with override_fail_fast: true)"
            )
        else:
            advice = (
                "nothing: the platform rebuilds silver from bronze's snapshot (a repair follows)"
            )
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

    # -- materializations and observations ------------------------------------------------
    def _materialization(
        self, materialization: dg.AssetMaterialization, run_id: str, at: float, source: str
    ) -> list[Signal]:
        key = materialization.asset_key
        if _subject(key) == key.to_user_string():
            return []
        subject, metadata = _subject(key), materialization.metadata
        signals = [
            Signal(
                AlertEvent.RUN_FAILED,
                subject,
                Change.CLEAR,
                Severity.CRITICAL,
                f"silver {subject} was written again by run {run_id}",
                None,
                {},
                f"/runs/{run_id}",
                at,
                source,
            )
        ]
        code = _value(metadata, "incident_code")
        if _value(metadata, "mode") == "rebuild" and code in LOSS_CODES:
            figures = {
                "watermark_before": _value(metadata, "watermark_before"),
                "watermark_after": _value(metadata, "watermark_after"),
            }
            lost = self._lost(
                subject,
                f"{subject}'s replay window was lost ({code})",
                figures,
                f"/runs/{run_id}",
                at,
                source,
            )
            repaired = Signal(
                AlertEvent.WINDOW_LOST,
                subject,
                Change.CLEAR,
                Severity.CRITICAL,
                f"silver rebuilt from bronze version {figures['watermark_after']} by run "
                f"{run_id} ({code}); incremental runs resume from there",
                None,
                figures,
                f"/runs/{run_id}",
                at,
                source,
            )
            signals += [lost, repaired]
        return signals

    def _observation(
        self, observation: dg.AssetObservation, run_id: str, at: float, source: str
    ) -> list[Signal]:
        outcome = _value(observation.metadata, "outcome")
        if outcome not in ("EQUAL", "DIFFERENT", "REPAIRED"):
            return []
        subject = _subject(observation.asset_key)
        differing = _value(observation.metadata, "differing_keys")
        return [
            Signal(
                AlertEvent.VERIFICATION_MISMATCH,
                subject,
                Change.OPEN if outcome == "DIFFERENT" else Change.CLEAR,
                Severity.CRITICAL,
                f"verification of {subject} by run {run_id}: {outcome}"
                + (f" ({differing} key(s) differ)" if outcome == "DIFFERENT" else ""),
                f"look at the keys the run names, then `cdf-platform verify --pipeline {subject} "
                "--repair` (or set verify_repair: auto)"
                if outcome == "DIFFERENT"
                else None,
                {"differing_keys": differing},
                f"/runs/{run_id}",
                at,
                source,
            )
        ]

    # -- runs ------------------------------------------------------------------------------
    def _run_start(self, run: dg.DagsterRun, at: float, source: str) -> list[Signal]:
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
                {"watermark": versions[0], "latest_version": versions[1]}
                if len(versions) == 2
                else {}
            )
            summary = f"{subject}'s replay window is lost" + (
                f": bronze versions after {versions[0]} can no longer be replayed"
                if versions
                else f" ({run.tags.get(INCIDENT_TAG)})"
            )
            link = f"/runs/{run.run_id}"
            signals.append(self._lost(subject, summary, figures, link, at, source))
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

    def _run_end(
        self,
        instance: dg.DagsterInstance,
        run: dg.DagsterRun,
        failed: bool,
        at: float,
        source: str,
    ) -> list[Signal]:
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
        return [*signals, *self._run_failed(instance, run, subject, link, at, source)]

    def _run_failed(
        self,
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
        subjects = [p for p in self.specs if silver_op_name(p) in failed_steps] or covered
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
