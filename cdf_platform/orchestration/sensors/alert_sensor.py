"""`alert_sensor`: the platform's alerts, the Dagster way (a sensor over the instance's check
and run events, so the OSS daemon runs it), sent once per incident and once when it ends.

Each tick reads what happened after the positions it last read (the checks' latest
evaluations, materializations, observations: `alert_signals`; runs starting and ending:
`run_signals`), folds them into incidents (`cdf_platform.alerts.incidents`), puts the messages
in the outbox, saves, and then delivers (`cdf_platform.alerts.delivery`): its state (position,
open incidents, outbox) is one value of the instance's key-value store, written before each
message is tried and after each is accepted, so a tick cut short by a daemon's restart loses
nothing and repeats nothing already delivered. A sensor started on an instance with history
begins at its newest event: it tells what happens from then on, not the past.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.storage.event_log.base import EventLogCursor

from cdf_platform.alerts.delivery import (
    AlertState,
    EmailSender,
    Sender,
    SlackSender,
    WebhookSender,
    deliver,
)
from cdf_platform.core.alert_config import AlertConfig, AlertTarget, SlackTarget
from cdf_platform.core.errors import InvalidAlertConfig
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.sensors.alert_signals import ASSET_EVENT_TYPES, SignalReader
from cdf_platform.orchestration.sensors.check_records import latest_evaluated
from cdf_platform.orchestration.sensors.run_signals import RUN_EVENT_TYPES

ALERT_SENSOR = "alert_sensor"
# The key of the alerts' state in the instance's key-value store.
STATE_KEY = "cdf_platform/alerts/state"
# Records read per tick, per kind.
BATCH = 500


class InstanceStore:
    """The alerts' state, one value of the instance's key-value store (PostgreSQL in the
    deployment): durable once `save` returns."""

    def __init__(self, instance: dg.DagsterInstance) -> None:
        self._storage = instance.run_storage

    def load(self) -> AlertState | None:
        """The saved state, or None before the first tick."""
        text = self._storage.get_cursor_values({STATE_KEY}).get(STATE_KEY)
        return AlertState.loads(text) if text else None

    def save(self, state: AlertState) -> None:
        """Write `state`."""
        self._storage.set_cursor_values({STATE_KEY: state.dumps()})


def _slack_post(target: SlackTarget) -> Callable[[str, str], None]:
    try:
        from dagster_slack import SlackResource  # type: ignore[import-not-found,unused-ignore]
    except ImportError as err:
        raise InvalidAlertConfig(
            "a Slack target needs dagster-slack, which is not installed",
            action='install the alerts extra (`pip install "cdf_platform[alerts]"`)',
        ) from err
    client = SlackResource(token=str(target.token)).get_client()
    client.base_url = target.api_url

    def post(channel: str, text: str) -> None:
        client.chat_postMessage(channel=channel, text=text)

    return post


def senders(config: AlertConfig) -> dict[str, Sender]:
    """One sender per target of `config` (its references read already)."""
    made: dict[str, Sender] = {}
    for name, target in config.targets.items():
        made[name] = _sender(target, config.ui_url)
    return made


def _sender(target: AlertTarget, ui_url: str | None) -> Sender:
    if target.webhook is not None:
        return WebhookSender(target.webhook, ui_url)
    if target.email is not None:
        return EmailSender(target.email, ui_url)
    assert target.slack is not None
    return SlackSender(_slack_post(target.slack), target.slack.channel, ui_url)


@dataclass(frozen=True)
class Seen:
    """One record to turn into signals: when, what, and a name unique to it."""

    at: float
    order: int
    entry: dg.EventLogEntry
    source: str


class EventReader:
    """Reads what happened after the positions in `cursors` (updated as it reads): the latest
    evaluation of each check in `check_keys` (one query for all), the materializations and
    observations, and the runs that started, succeeded and failed. Each position is one the
    instance's storage keeps across runs (a run-sharded SQLite instance too).

    A check evaluated twice between two ticks is seen at its latest: alerts follow a check's
    state, not each evaluation."""

    def __init__(self, check_keys: Sequence[dg.AssetCheckKey]) -> None:
        self.check_keys = list(check_keys)

    def start(self, instance: dg.DagsterInstance) -> dict[str, Any]:
        """Positions at the newest record of each kind (nothing before them is told)."""
        storage = instance.event_log_storage
        cursors: dict[str, Any] = {
            "checks": {
                key.to_user_string(): record.id
                for key, record in latest_evaluated(instance, self.check_keys).items()
            }
        }
        for event_type in ASSET_EVENT_TYPES:
            newest = storage.get_event_records(dg.EventRecordsFilter(event_type), limit=1)
            cursors[event_type.value] = newest[0].storage_id if newest else 0
        for event_type in RUN_EVENT_TYPES:
            result = instance.fetch_run_status_changes(event_type, limit=1)
            cursors[event_type.value] = (
                EventLogCursor.from_storage_id(result.records[0].storage_id).to_string()
                if result.records
                else None
            )
        return cursors

    def read(self, instance: dg.DagsterInstance, cursors: dict[str, Any]) -> list[Seen]:
        """What happened after `cursors` (at most `BATCH` of each kind), oldest first."""
        seen: list[Seen] = []
        storage = instance.event_log_storage
        for key, execution in latest_evaluated(instance, self.check_keys).items():
            name = key.to_user_string()
            if execution.event is None or execution.id <= cursors["checks"].get(name, 0):
                continue  # seen
            cursors["checks"][name] = execution.id
            event = execution.event
            seen.append(Seen(event.timestamp, execution.id, event, f"c{execution.id}"))
        for event_type in ASSET_EVENT_TYPES:
            after = cursors[event_type.value]
            records = storage.get_event_records(
                dg.EventRecordsFilter(event_type, after_cursor=after), limit=BATCH, ascending=True
            )
            for record in records:
                entry = record.event_log_entry
                seen.append(
                    Seen(entry.timestamp, record.storage_id, entry, f"a{record.storage_id}")
                )
            cursors[event_type.value] = records[-1].storage_id if records else after
        for event_type in RUN_EVENT_TYPES:
            result = instance.fetch_run_status_changes(
                event_type, limit=BATCH, cursor=cursors[event_type.value], ascending=True
            )
            for record in result.records:
                entry = record.event_log_entry
                seen.append(
                    Seen(entry.timestamp, record.storage_id, entry, f"r{record.storage_id}")
                )
            if result.records:
                cursors[event_type.value] = result.cursor
        seen.sort(key=lambda item: (item.at, item.order))
        return seen


def alert_tick(
    instance: dg.DagsterInstance,
    config: AlertConfig,
    reader: SignalReader,
    events: EventReader,
    targets: Mapping[str, Sender],
    log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
) -> str:
    """One round: read, fold, save, deliver; returns what it did in a line."""
    store = InstanceStore(instance)
    state = store.load()
    if state is None:
        state = AlertState(cursors=events.start(instance))
        store.save(state)
    seen = events.read(instance, state.cursors)
    now = time.time()
    told = 0
    for item in seen:
        for signal in reader.signals(instance, item.entry, item.source):
            alerts = state.book.fold(signal)
            told += len(alerts)
            state.post(alerts, config, now)
    store.save(state)
    logger = log if log is not None else dg.get_dagster_logger()
    done = deliver(state, targets, config, now=now, save=store.save, log=logger)
    waiting = sorted({item["target"] for item in state.outbox})
    return (
        f"{len(seen)} event(s) read, {told} alert(s) raised, {len(done.sent)} delivered"
        + (
            f"; waiting for {', '.join(waiting)} ({len(state.outbox)} message(s))"
            if waiting
            else ""
        )
        + (f"; failed now: {'; '.join(err for _, _, err in done.failed)}" if done.failed else "")
    )


def build_alert_sensor(
    specs: Sequence[PipelineSpec],
    config: AlertConfig,
    check_keys: Sequence[dg.AssetCheckKey],
    *,
    environ: Mapping[str, str] | None = None,
) -> dg.SensorDefinition:
    """The alert sensor for `config` over the checks `check_keys` (its `{env: NAME}` values
    read from `environ`, default the process environment, when the definitions load).

    Raises:
        InvalidAlertConfig: a reference whose variable is not set, or a Slack target without
            dagster-slack.
    """
    resolved = config.resolved(os.environ if environ is None else environ)
    targets = senders(resolved)
    reader = SignalReader({spec.id: spec for spec in specs}, resolved.quarantine_rows_above)
    events = EventReader(check_keys)
    names = ", ".join(f"{name} ({target.kind})" for name, target in resolved.targets.items())

    @dg.sensor(
        name=ALERT_SENSOR,
        minimum_interval_seconds=15,
        description=f"Tells {names} of replay windows at risk or lost, repairs, destructive "
        "actions, quarantines, foreign writes, verification mismatches and runs failed for "
        "good: once per incident and once when it ends (the `alerts:` section).",
        # An operator who configures alerts wants them, whatever $CDF_AUTOMATION says.
        default_status=dg.DefaultSensorStatus.RUNNING,
    )
    def _alert_sensor(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        """Reads the new events, raises the alerts they call for and delivers the outbox."""
        return dg.SkipReason(
            alert_tick(context.instance, resolved, reader, events, targets, context.log)
        )

    return _alert_sensor
