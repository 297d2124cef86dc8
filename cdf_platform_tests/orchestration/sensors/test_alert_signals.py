"""What the alert sensor reads from a run that failed, on a real instance: a shared run's
failure opens `run_failed` for the pipelines whose steps failed only (the others wrote silver),
with the step's error; a run Dagster's run retries will take opens nothing."""

from __future__ import annotations

import dagster as dg
from dagster._core.events import DagsterEventType

from cdf_platform.alerts.incidents import Change
from cdf_platform.core.alert_config import AlertEvent
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.sensors.alert_signals import SignalReader
from cdf_platform.orchestration.shared.keys import WILL_RETRY_TAG, silver_key

SPECS = [
    PipelineSpec(id=i, source=f"/b/{i}", target=f"/s/{i}", keys=["k"]) for i in ("kept", "broken")
]


@dg.asset(key=silver_key("kept"))
def kept() -> None:
    """Writes."""


@dg.asset(key=silver_key("broken"))
def broken() -> None:
    """Fails in its own code."""
    raise dg.Failure("SpecChanged [pipeline=broken]: the spec changed. What to do: rebuild.")


def failed_run(instance: dg.DagsterInstance, tags: dict[str, str] | None = None) -> list[tuple]:
    result = dg.materialize([kept, broken], instance=instance, raise_on_error=False, tags=tags)
    assert not result.success
    reader = SignalReader({spec.id: spec for spec in SPECS})
    signals = []
    for record in instance.get_records_for_run(result.run_id).records:
        entry = record.event_log_entry
        if entry.dagster_event_type in (
            DagsterEventType.RUN_FAILURE,
            DagsterEventType.ASSET_MATERIALIZATION,
        ):
            signals += reader.signals(instance, entry, str(record.storage_id))
    return [(s.event, s.subject, s.change, s.summary) for s in signals]


def test_a_shared_run_s_failure_is_its_failed_steps_pipelines() -> None:
    with dg.instance_for_test() as instance:
        signals = failed_run(instance)
    assert [(event, subject, change) for event, subject, change, _ in signals] == [
        (AlertEvent.RUN_FAILED, "kept", Change.CLEAR),
        (AlertEvent.RUN_FAILED, "broken", Change.OPEN),
    ]
    assert "SpecChanged [pipeline=broken]: the spec changed" in signals[1][3]


def test_a_run_that_dagster_retries_opens_nothing() -> None:
    with dg.instance_for_test() as instance:
        signals = failed_run(instance, tags={WILL_RETRY_TAG: "true"})
    assert [(event, change) for event, _, change, _ in signals] == [
        (AlertEvent.RUN_FAILED, Change.CLEAR)
    ]


@dg.asset(
    key=silver_key("kept"),
    check_specs=[dg.AssetCheckSpec("replay_window", asset=silver_key("kept"))],
)
def lost() -> dg.MaterializeResult:
    """Its replay window is lost."""
    return dg.MaterializeResult(
        check_results=[
            dg.AssetCheckResult(
                check_name="replay_window",
                passed=False,
                metadata={"state": "LOST"},
                description="kept: replay window lost",
            )
        ]
    )


def test_a_lost_window_s_advice_follows_the_one_repair_decision() -> None:
    advice = {}
    for mode in ("SNAPSHOT_REBUILD", "FAIL_FAST"):
        spec = PipelineSpec(
            id="kept", source="/b/kept", target="/s/kept", keys=["k"], fallback_mode=mode
        )
        reader = SignalReader({"kept": spec})
        with dg.instance_for_test() as instance:
            result = dg.materialize([lost], instance=instance)
            (entry,) = [
                record.event_log_entry
                for record in instance.get_records_for_run(result.run_id).records
                if record.event_log_entry.dagster_event_type
                is DagsterEventType.ASSET_CHECK_EVALUATION
            ]
            (signal,) = reader.signals(instance, entry, "1")
        assert (signal.event, signal.change) == (AlertEvent.WINDOW_LOST, Change.OPEN)
        advice[mode] = signal.advice
    assert advice["SNAPSHOT_REBUILD"].startswith("nothing: the platform rebuilds silver")
    assert advice["FAIL_FAST"].startswith("kept is FAIL_FAST: read the incident, then rebuild")
