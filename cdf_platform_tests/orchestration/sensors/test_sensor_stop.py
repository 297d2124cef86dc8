"""A sensor that requests runs requests none once it is stopped, even in a tick the daemon
began for it before the stop (it lists the running sensors, then evaluates each in a thread
pool): whoever stops it and waits for its ticks to end (`at_rest`) sees no run after. And a
stop the daemon's write-back of a stale state undid is made again (`stop_sensor`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.remote_representation.code_location import CodeLocation
from dagster._core.remote_representation.external import RemoteRepository, RemoteSensor
from dagster._core.scheduler.instigation import InstigatorStatus
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.sensor import mark_sensor_state_for_tick

from cdf_platform.core.config import AUTOMATION_ENV, LAKE_ROOT_ENV, MASTER_ENV, PIPELINES_FILE_ENV
from cdf_platform.orchestration.sensors.incremental_sensor import INCREMENTAL_SENSOR
from cdf_platform.orchestration.sensors.rebuild_sensor import REBUILD_SENSOR
from cdf_platform.orchestration.sensors.sensor_stop import (
    STOPPED_REASON,
    is_stopped,
    stop_sensor,
)
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_tests.lake_platform import ORDERS, bronze_batch, lake_defs

LOCATION = "cdf_platform"


@contextmanager
def code_location(
    lake: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[dg.DagsterInstance, CodeLocation, RemoteRepository]]:
    """The platform's definitions over `lake` as the daemon loads them, with a test instance."""
    for name, value in (
        (LAKE_ROOT_ENV, str(lake)),
        (PIPELINES_FILE_ENV, str(lake / "pipelines.yaml")),
        (MASTER_ENV, "local[2]"),
        (AUTOMATION_ENV, "off"),  # the sensors stopped until started
    ):
        monkeypatch.setenv(name, value)
    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="cdf_platform.definitions", attribute="defs"),
        location_name=LOCATION,
    )
    with (
        dg.instance_for_test() as instance,
        create_test_daemon_workspace_context(
            InProcessWorkspaceLoadTarget(origin), instance
        ) as workspace,
    ):
        location = workspace.create_request_context().get_code_location(LOCATION)
        (repository,) = location.get_repositories().values()
        yield instance, location, repository


def test_a_tick_evaluated_after_the_stop_requests_nothing(
    spark_resource: SparkResource, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    bronze_batch(defs, "orders", dg.DagsterInstance.ephemeral(), 10)  # bronze at version 1
    with code_location(lake, monkeypatch) as (instance, location, repository):
        sensor = repository.get_sensor(INCREMENTAL_SENSOR)

        def evaluated(remote: RemoteSensor) -> tuple[list[str], str | None]:
            """The daemon's evaluation of `remote`: its run keys and its skip message."""
            data = location.get_sensor_execution_data(
                instance, repository.handle, remote.name, None, None, None, None, None
            )
            return [request.run_key or "" for request in data.run_requests or []], (
                data.skip_message
            )

        # Never started (stopped by default, no state stored): an evaluation asked for
        # directly still decides as before.
        assert evaluated(sensor) == (["incremental:orders:1"], None)
        instance.start_sensor(sensor)
        assert evaluated(sensor) == (["incremental:orders:1"], None)
        # Stopped between the daemon's listing and its evaluation of the tick.
        instance.stop_sensor(sensor.get_remote_origin_id(), sensor.selector_id, sensor)
        assert evaluated(sensor) == ([], STOPPED_REASON)
        instance.start_sensor(sensor)
        assert evaluated(sensor) == (["incremental:orders:1"], None)

        # The rebuild sensor too: it says so rather than reading the checks.
        rebuild = repository.get_sensor(REBUILD_SENSOR)
        instance.start_sensor(rebuild)
        assert evaluated(rebuild) == ([], "no new replay_window loss")
        instance.stop_sensor(rebuild.get_remote_origin_id(), rebuild.selector_id, rebuild)
        assert evaluated(rebuild) == ([], STOPPED_REASON)


def test_a_stop_the_daemons_stale_write_undid_is_made_again(
    spark_resource: SparkResource,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    lake_defs(spark_resource, lake, ORDERS)  # the pipelines file the definitions load
    with code_location(lake, monkeypatch) as (instance, _, repository):
        sensor = repository.get_sensor(INCREMENTAL_SENSOR)
        instance.start_sensor(sensor)
        # A tick starting as the stop is written: the daemon read the state (RUNNING) just
        # before the stop and writes it back, with the tick's start, just after.
        read = instance.get_instigator_state(sensor.get_remote_origin_id(), sensor.selector_id)
        assert read is not None and read.status is InstigatorStatus.RUNNING

        def tick_starts() -> None:
            deadline = time.monotonic() + 30
            while not is_stopped(instance, sensor) and time.monotonic() < deadline:
                time.sleep(0.01)
            mark_sensor_state_for_tick(instance, sensor, read, datetime.now(UTC))

        daemon = threading.Thread(target=tick_starts)
        daemon.start()
        with caplog.at_level(logging.WARNING):
            stop_sensor(instance, sensor, 60, settle=0.5)
        daemon.join()
        assert is_stopped(instance, sensor)
        assert "running again after its stop" in caplog.text
