"""Silver assets through real `dg.materialize` runs: initial load, incremental MERGE, and a no-op
that never starts Spark, each with its metadata; and the run going through the watermark IO
manager (its input is the pinned plan, its output the MERGE)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.orchestration.io_manager.watermark_io_manager import WatermarkIOManager
from cdf_platform.orchestration.shared.keys import WATERMARK_IO_MANAGER_KEY, silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    control_for,
    lake_defs,
    last_spark_job_id,
    materialization,
    materialize,
    table_rows,
)

SILVER_ORDERS = silver_key("orders")


def _silver_step_lines(
    instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult
) -> list[str]:
    """The first words of each line the silver step logged (its events of no other kind)."""
    step = SILVER_ORDERS.to_python_identifier()
    return [
        entry.user_message.split(":")[0]
        for entry in instance.all_logs(result.run_id)
        if entry.dagster_event is None and entry.step_key == step
    ]


def test_bronze_then_silver_twice_loads_then_merges_then_noops_without_spark(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze, silver = str(lake / "bronze" / "orders"), str(lake / "silver" / "orders")

    assert bronze_batch(defs, "orders", instance, 40)["version"] == 1
    loaded = materialize(defs, SILVER_ORDERS, instance=instance)
    first = materialization(loaded, SILVER_ORDERS)
    assert (first["mode"], first["start_version"], first["end_version"]) == (
        "initial_load",
        "none",
        1,
    )
    assert (first["rows_inserted"], first["rows_updated"], first["rows_deleted"]) == (40, 0, 0)
    assert (first["watermark_before"], first["watermark_after"]) == ("none", 1)
    assert (first["version_lag_before"], first["version_lag_after"]) == (2, 0)
    assert first["lag_hours_after"] == 0.0
    assert first["spark_started"] is True
    assert first["incident_code"] == "none"
    assert first["path"] == silver
    assert table_rows(spark, silver) == table_rows(spark, bronze)

    # Version 2: 24 updates, 12 inserts, 4 deletes in one bronze commit.
    batch = bronze_batch(defs, "orders", instance, 40)
    assert (batch["rows_updated"], batch["rows_inserted"], batch["rows_deleted"]) == (24, 12, 4)
    second = materialization(materialize(defs, SILVER_ORDERS, instance=instance), SILVER_ORDERS)
    assert (second["mode"], second["start_version"], second["end_version"]) == ("incremental", 2, 2)
    assert (second["rows_inserted"], second["rows_updated"], second["rows_deleted"]) == (12, 24, 4)
    assert (second["version_lag_before"], second["version_lag_after"]) == (1, 0)
    assert round(second["lag_hours_before"], 2) == second["lag_hours_before"]  # seconds: 0.0
    assert second["duration_seconds"] > 0.0
    assert table_rows(spark, silver) == table_rows(spark, bronze)
    by_version = table_rows(spark, silver, "_source_commit_version")
    assert (by_version.count((1,)), by_version.count((2,))) == (40 - 24 - 4, 24 + 12)

    # No bronze version after the watermark: a no-op that runs no Spark job at all.
    jobs_before = last_spark_job_id(spark)
    nothing = materialize(defs, SILVER_ORDERS, instance=instance)
    third = materialization(nothing, SILVER_ORDERS)
    assert (third["mode"], third["start_version"], third["end_version"]) == ("noop", "none", "none")
    assert (third["rows_inserted"], third["rows_updated"], third["rows_deleted"]) == (0, 0, 0)
    assert (third["watermark_before"], third["watermark_after"]) == (2, 2)
    assert third["spark_started"] is False
    assert last_spark_job_id(spark) == jobs_before
    assert table_rows(spark, silver) == table_rows(spark, bronze)
    # A run with Spark work says what it will apply before it; one without says it once.
    assert _silver_step_lines(instance, loaded) == ["pinned change set", "orders"]
    assert _silver_step_lines(instance, nothing) == ["orders"]


def test_silver_is_planned_and_written_by_the_watermark_io_manager_it_is_given(
    spark: SparkSession, spark_resource: SparkResource, lake: Path, tmp_path: Path
) -> None:
    """The definitions' `watermark_io_manager` is swapped for one whose lake keeps its control
    tables elsewhere: the run's state and load log land there, and the `lake` resource's
    control tables stay empty, so the run went through the IO manager, both ways."""
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze_batch(defs, "orders", instance, 20)
    elsewhere = tmp_path / "io_manager_control"
    layout = control_for(lake, ORDERS)
    own_lake = LakeLayout(
        lake_root=layout.lake_root,
        control_root=str(elsewhere),
        pipelines_file=layout.pipelines_file,
    )
    resources = {
        **dict(defs.resources or {}),
        WATERMARK_IO_MANAGER_KEY: WatermarkIOManager(spark=spark_resource, lake=own_lake),
    }
    assets = [*(defs.assets or []), *(defs.asset_checks or [])]

    result = dg.materialize(
        assets,  # type: ignore[arg-type]
        selection=dg.AssetSelection.assets(SILVER_ORDERS),
        resources=resources,
        instance=instance,
    )

    figures = materialization(result, SILVER_ORDERS)
    assert (figures["mode"], figures["watermark_after"]) == ("initial_load", 1)
    assert ControlTable(str(elsewhere)).read_states()["orders"]["last_commit_version"] == 1
    assert [row["mode"] for row in ControlTable(str(elsewhere)).read_log("orders")] == [
        "initial_load"
    ]
    assert layout.control().read_states() == {}
    assert table_rows(spark, str(lake / "silver" / "orders")) == table_rows(
        spark, str(lake / "bronze" / "orders")
    )
    io_events = [
        (event.event_type, getattr(event.event_specific_data, "manager_key", None))
        for event in result.all_events
        if event.event_type
        in (dg.DagsterEventType.LOADED_INPUT, dg.DagsterEventType.HANDLED_OUTPUT)
    ]
    assert io_events == [
        (dg.DagsterEventType.LOADED_INPUT, WATERMARK_IO_MANAGER_KEY),
        (dg.DagsterEventType.HANDLED_OUTPUT, WATERMARK_IO_MANAGER_KEY),
    ]
