"""The alert sensor's reader of check evaluations on a real Dagster instance (JVM-free): a tick
that lands while a check's run has planned it but not evaluated it yet still reads the
evaluation on a later tick, once."""

from __future__ import annotations

import threading

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from cdf_platform.orchestration.sensors.alert_sensor import EventReader
from cdf_platform.services.service import wait_for


def test_a_check_planned_at_a_tick_is_read_once_its_run_evaluates_it() -> None:
    evaluate = threading.Event()

    @dg.asset
    def table() -> int:
        return 1

    @dg.asset_check(asset=table)
    def headroom() -> dg.AssetCheckResult:
        evaluate.wait(60)
        return dg.AssetCheckResult(passed=False, description="at risk")

    key = dg.AssetCheckKey(table.key, "headroom")
    reader = EventReader([key])

    def checks_read(cursors: dict[str, object], instance: dg.DagsterInstance) -> list[str]:
        return [
            seen.entry.dagster_event.event_type_value  # type: ignore[union-attr]
            for seen in reader.read(instance, cursors)
            if seen.source.startswith("c")
        ]

    def planned(instance: dg.DagsterInstance) -> bool:
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key([key])
        return key in latest and latest[key].status == AssetCheckExecutionRecordStatus.PLANNED

    with dg.instance_for_test() as instance:
        evaluate.set()
        # The first run's evaluation: before the reader starts, never read.
        dg.materialize([table, headroom], instance=instance, raise_on_error=False)
        cursors = reader.start(instance)
        evaluate.clear()
        run = threading.Thread(
            target=dg.materialize,
            args=([table, headroom],),
            kwargs={"instance": instance, "raise_on_error": False},
        )
        run.start()
        try:
            wait_for("the second run's check planned", lambda: planned(instance), 60, 0.05)
            assert checks_read(cursors, instance) == []  # a tick while the run evaluates it
        finally:
            evaluate.set()
            run.join(60)
        assert checks_read(cursors, instance) == ["ASSET_CHECK_EVALUATION"]
        assert checks_read(cursors, instance) == []  # read once
