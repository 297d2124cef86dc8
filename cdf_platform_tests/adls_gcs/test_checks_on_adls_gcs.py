"""Silver's checks and the rebuild sensor with real Dagster on ADLS (Azurite) and GCS
(fake-gcs-server): they read the logs on the store and never start Spark."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_tests.adls_gcs.lake import (
    PIPELINE,
    WATERMARK,
    EmulatedStore,
    build_lake,
    vacuum_change_files,
)


class SparkNeverStarted(SparkResource):
    """The Spark resource of these definitions: creating its session fails the run."""

    def _init_session(self) -> None:
        raise AssertionError("the checks and the sensor must not start Spark")


def _replay_window(instance: dg.DagsterInstance, defs: dg.Definitions) -> dg.AssetCheckEvaluation:
    """The replay-window evaluation of one `checks_job` run."""
    result = defs.resolve_job_def("checks_job").execute_in_process(
        instance=instance, raise_on_error=False
    )
    # A run fails only where the blocking check fails (with ERROR), for nothing else.
    failures = [e.step_failure_data.error for e in result.all_events if e.is_step_failure]
    assert all(error and error.cls_name == "DagsterAssetCheckFailedError" for error in failures)
    (evaluation,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == silver_key(PIPELINE) and e.check_name == REPLAY_WINDOW
    ]
    return evaluation


def test_replay_window_check_sees_the_loss_and_the_sensor_asks_for_a_rebuild(
    store: EmulatedStore, tmp_path: Path
) -> None:
    lake = build_lake(store, tmp_path)
    defs = build_defs(lake.layout, SparkNeverStarted(master="local[1]"), automation=False)
    # Before the loss the status is OK (test_status_on_adls_gcs); a run costs ~2 s here.
    vacuum_change_files(lake.spec.source, WATERMARK + 1)
    with dg.instance_for_test() as instance:
        lost = _replay_window(instance, defs)
        assert not lost.passed
        assert lost.severity is dg.AssetCheckSeverity.ERROR
        assert lost.metadata["state"].value == "LOST"
        assert lost.metadata["watermark"].value == WATERMARK
        assert lost.metadata["earliest_replayable_version"].value == WATERMARK + 2
        assert lost.metadata["problem_code"].value == "WATERMARK_OUTSIDE_RETENTION"

        sensor = defs.resolve_sensor_def("rebuild_sensor")
        resources = {k: (defs.resources or {})[k] for k in sensor.required_resource_keys}
        with dg.build_sensor_context(
            instance=instance, definitions=defs, resources=resources
        ) as context:
            tick = sensor(context)
        assert isinstance(tick, dg.SensorResult)
        (request,) = tick.run_requests or []
        assert request.asset_selection == [silver_key(PIPELINE)]
