"""What the alert sensor sees in the instance's events, as `Signal`s
(`cdf_platform.alerts.incidents`): check evaluations, silver materializations, verification
observations, and runs starting, failing and succeeding.

- `replay_window` says `LOW_HEADROOM`: the window is at risk; `LOST`: it is lost; passed: neither.
- A silver materialization of a rebuild that names a loss: repaired. Any silver
  materialization: its pipeline's runs succeed again.
- `foreign_writes` failed / passed; an expectation check's quarantine above
  `quarantine_rows_above` / within it; a verification DIFFERENT / EQUAL or REPAIRED.
- Runs starting, failing and succeeding: `run_signals`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.events import DagsterEventType

from cdf_platform.alerts.incidents import Change, Signal
from cdf_platform.core.alert_config import AlertEvent, Severity
from cdf_platform.core.errors import REBUILDABLE
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.checks.silver_checks import FOREIGN_WRITES, REPLAY_WINDOW
from cdf_platform.orchestration.sensors.run_signals import lost_window, run_ended, run_started
from cdf_platform.orchestration.shared.keys import SILVER_PREFIX

# The incident codes of a loss a rebuild repairs (a spec edit's or a person's rebuild is none).
LOSS_CODES = frozenset(cls.incident_code for cls in REBUILDABLE)
# The asset events the sensor reads (besides the checks' evaluations; runs: `run_signals`).
ASSET_EVENT_TYPES = (DagsterEventType.ASSET_MATERIALIZATION, DagsterEventType.ASSET_OBSERVATION)


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
            return run_started(self.specs, run, at, source)
        return run_ended(
            self.specs, instance, run, kind is DagsterEventType.RUN_FAILURE, at, source
        )

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
            return [lost_window(self.specs, subject, description, figures, link, at, source)]
        return []

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
            lost = lost_window(
                self.specs,
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
