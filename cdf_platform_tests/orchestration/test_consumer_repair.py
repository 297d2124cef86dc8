"""Consumer assets of the watermark IO manager get silver's guarantees: their lag and window
checks plot the same figures, VACUUM of the silver they read counts their watermarks, and when
a VACUUM breaks their window anyway the rebuild sensor recomputes them once (a FAIL_FAST one is
left for a person), exactly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.definitions import build_defs
from cdf_platform.demo.data.bronze_assets import demo_bronze_assets
from cdf_platform.demo.data.gold_asset import CUSTOMER_ORDER_TOTALS_KEY, customer_order_totals_asset
from cdf_platform.orchestration.checks.silver_checks import CONSUMER_LAG, REPLAY_WINDOW
from cdf_platform.orchestration.jobs.maintenance_jobs import MAINTENANCE_JOB, maintenance_run_config
from cdf_platform.orchestration.sensors.consumers import (
    ConsumerAsset,
    consumer_check_results,
)
from cdf_platform.orchestration.shared.keys import WATERMARK_IO_MANAGER_KEY
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.status import PipelineStatus, WindowState
from cdf_platform.planning.vacuum import VacuumAction, plan_vacuum
from cdf_platform.spark.read.batch import ChangeBatch, MergeRows, ReplaceRows, TableWrite
from cdf_platform.state.consumer_marks import read_consumer_marks
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    control_for,
    expected_totals,
    materialization,
    materialize,
    table_rows,
    vacuum_breaking_the_window,
)

GOLD = CUSTOMER_ORDER_TOTALS_KEY
STRICT = dg.AssetKey(["gold", "orders_strict_copy"])


@dg.asset(
    key=STRICT,
    io_manager_key=WATERMARK_IO_MANAGER_KEY,
    ins={"orders": dg.AssetIn(["silver", "orders"], metadata={"fallback_mode": "FAIL_FAST"})},
    metadata={"min_headroom_hours": 2, "max_allowed_lag_hours": 12},
)
def orders_strict_copy(orders: ChangeBatch) -> TableWrite | None:
    """Every live order; a lost window fails its runs until a person recomputes it."""
    if orders.nothing_new:
        return None
    if orders.full:
        return ReplaceRows(orders.snapshot())
    return MergeRows(orders.changes(), keys=["order_id"], delete_when="s._change_type = 'delete'")


def evaluation(result: dg.ExecuteInProcessResult, key: dg.AssetKey, check: str) -> Any:
    """The one evaluation of `check` on `key` in `result`."""
    (found,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == key and e.check_name == check
    ]
    return found


def values(found: Any, *names: str) -> tuple[Any, ...]:
    return tuple(found.metadata[name].value for name in names)


def tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None) -> Any:
    """One evaluation of the real rebuild sensor against `instance`."""
    sensor = defs.resolve_sensor_def("rebuild_sensor")
    with dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs) as context:
        return sensor(context)


def silver_version(spark: SparkSession, silver: str) -> int:
    """The latest version of the Delta table at `silver`."""
    (row,) = spark.sql(f"DESCRIBE HISTORY delta.`{silver}` LIMIT 1").collect()
    return int(row["version"])


def test_a_consumer_is_checked_counted_by_vacuum_and_recomputed_once_its_window_is_lost(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    layout = control_for(lake, ORDERS)
    platform = build_defs(
        layout,
        spark_resource,
        bronze_written_here=[asset.key for asset in demo_bronze_assets],
        consumers=[customer_order_totals_asset("orders"), orders_strict_copy],
        automation=False,
        # RETAIN 0 below meets the consumer guard, not the deployment's permission.
        allow_destructive=True,
    )
    defs = dg.Definitions.merge(platform, dg.Definitions(assets=demo_bronze_assets))
    specs = layout.specs()
    silver = specs[0].target
    gold = layout.table_path("gold", "customer_order_totals")
    strict = layout.table_path("gold", "orders_strict_copy")
    checks_job = defs.resolve_job_def("checks_job")
    incremental = defs.resolve_job_def("incremental_job")

    with dg.DagsterInstance.ephemeral() as instance:
        bronze_batch(defs, "orders", instance, 30)
        assert incremental.execute_in_process(instance=instance).success
        first = materialize(defs, GOLD, STRICT, instance=instance)
        read_up_to = silver_version(spark, silver)
        for key in (GOLD, STRICT):
            # The consumer's checks run with it, on the watermark its write just committed.
            window = evaluation(first, key, REPLAY_WINDOW)
            assert window.passed
            assert values(window, "state", "input", "watermark") == (
                "OK",
                "silver/orders",
                read_up_to,
            )
            assert values(evaluation(first, key, CONSUMER_LAG), "version_lag") == (0,)
        assert values(evaluation(first, STRICT, REPLAY_WINDOW), "limit", "fallback_mode") == (
            "warns below 2 h (min_headroom_hours)",
            "FAIL_FAST",
        )
        registered = layout.control().read_consumers(silver)
        assert [row["consumer"] for row in registered] == [
            "gold/customer_order_totals",
            "gold/orders_strict_copy",
        ]

        # Silver moves on twice while the consumers wait: they lag, their window still holds.
        for _ in range(2):
            bronze_batch(defs, "orders", instance, 30)
            assert incremental.execute_in_process(instance=instance).success
        latest = silver_version(spark, silver)
        behind = checks_job.execute_in_process(instance=instance)
        lag = evaluation(behind, GOLD, CONSUMER_LAG)
        assert lag.passed
        assert values(lag, "version_lag", "data_version_lag", "watermark") == (
            latest - read_up_to,
            2,
            read_up_to,
        )
        assert isinstance(lag.metadata["lag_hours"], dg.FloatMetadataValue)
        assert evaluation(behind, GOLD, REPLAY_WINDOW).passed

        # VACUUM of silver counts both consumers: RETAIN 0 is refused while they are behind,
        # from the maintenance job too.
        decision = plan_vacuum(silver, specs, retain_zero=True, control=layout.control())
        assert decision.action is VacuumAction.REFUSE
        assert [
            (c.consumer, c.kind, c.watermark, c.first_needed_version) for c in decision.consumers
        ] == [
            ("gold/customer_order_totals", "asset", read_up_to, read_up_to + 1),
            ("gold/orders_strict_copy", "asset", read_up_to, read_up_to + 1),
        ]
        refused = defs.resolve_job_def(MAINTENANCE_JOB).execute_in_process(
            instance=instance,
            run_config=maintenance_run_config("silver/orders", retain_zero=True),
            raise_on_error=False,
        )
        assert not refused.success
        assert silver_version(spark, silver) == latest  # nothing vacuumed

        # Someone vacuums silver anyway, past the guard: both consumers' windows are lost.
        vacuum_breaking_the_window(spark, silver)
        broken = checks_job.execute_in_process(instance=instance, raise_on_error=False)
        for key, mode in ((GOLD, "SNAPSHOT_REBUILD"), (STRICT, "FAIL_FAST")):
            lost = evaluation(broken, key, REPLAY_WINDOW)
            assert not lost.passed
            assert lost.severity is dg.AssetCheckSeverity.ERROR
            assert values(lost, "state", "problem_code", "fallback_mode", "watermark") == (
                "LOST",
                "WATERMARK_OUTSIDE_RETENTION",
                mode,
                read_up_to,
            )
            assert lost.metadata["headroom_hours"].value <= 0.0
        # The FAIL_FAST consumer's own run fails with the classified error, writing nothing.
        failed = materialize(defs, STRICT, instance=instance, raise_on_error=False)
        assert not failed.get_asset_materialization_events()
        marks = read_consumer_marks(strict, STRICT.to_user_string())
        assert marks is not None and marks.version_of("silver/orders") == read_up_to

        # One recompute for the loss; the FAIL_FAST consumer is named and left alone.
        first_tick = tick(defs, instance, None)
        (request,) = first_tick.run_requests
        assert request.job_name == "recompute_job"
        assert request.asset_selection == [GOLD]
        assert request.run_key == (
            f"recompute:gold/customer_order_totals:{read_up_to}:{silver_version(spark, silver)}"
        )
        second_tick = tick(defs, instance, first_tick.cursor)
        assert not second_tick.run_requests
        assert "left for a person (FAIL_FAST): gold/orders_strict_copy" in str(
            second_tick.skip_reason
        )

        recompute = defs.resolve_job_def("recompute_job")
        repaired = recompute.execute_in_process(
            instance=instance, asset_selection=request.asset_selection, tags=request.tags
        )
        outcome = materialization(repaired, GOLD)
        assert (outcome["mode"], outcome["end_version"]) == ("full", silver_version(spark, silver))
        assert "full recompute was requested" in outcome["reason"]
        assert table_rows(spark, gold) == expected_totals(spark, silver)
        assert evaluation(repaired, GOLD, REPLAY_WINDOW).passed

        # A person recomputes the FAIL_FAST consumer the same way.
        by_hand = recompute.execute_in_process(instance=instance, asset_selection=[STRICT])
        assert materialization(by_hand, STRICT)["silver/orders mode"] == "full"
        assert table_rows(spark, strict) == table_rows(spark, silver)

        healed = checks_job.execute_in_process(instance=instance)
        for key in (GOLD, STRICT):
            assert evaluation(healed, key, REPLAY_WINDOW).passed
        assert not tick(defs, instance, second_tick.cursor).run_requests


def _status(state: WindowState, lag_hours: float, headroom: float | None) -> PipelineStatus:
    return PipelineStatus(
        pipeline_id="gold/joined",
        watermark=4,
        latest_version=9,
        version_lag=5,
        data_version_lag=3,
        lag_hours=lag_hours,
        earliest_replayable_version=2 if state is not WindowState.LOST else 7,
        replayable=state is not WindowState.LOST,
        headroom_hours=headroom,
        retention_horizon_hours=168.0,
        state=state,
        lag_exceeded=lag_hours > 24,
        problem_code="WATERMARK_OUTSIDE_RETENTION" if state is WindowState.LOST else None,
        problem="lost" if state is WindowState.LOST else None,
    )


def test_a_consumer_with_two_inputs_is_judged_by_its_worst_input_and_plots_each() -> None:
    @dg.asset(
        key=["gold", "joined"],
        io_manager_key=WATERMARK_IO_MANAGER_KEY,
        ins={"a": dg.AssetIn(["silver", "a"]), "b": dg.AssetIn(["silver", "b"])},
    )
    def joined(a: ChangeBatch, b: ChangeBatch) -> None:
        """Two inputs."""

    consumer = ConsumerAsset.of(joined)
    statuses = {
        # a: far behind but replayable; b: less behind, its window lost (a lost window's
        # headroom is 0 in every view: `shown_headroom`).
        "silver/a": _status(WindowState.OK, 30.0, 100.0),
        "silver/b": _status(WindowState.LOST, 3.0, 0.0),
    }
    lag, window = consumer_check_results(
        consumer,
        statuses,
        consumer.fallback_mode(FallbackMode.SNAPSHOT_REBUILD),
        {CONSUMER_LAG, REPLAY_WINDOW},
    )
    assert not lag.passed and str(lag.description).startswith("silver/a: ")
    assert lag.metadata["input"].value == "silver/a"
    assert lag.metadata["silver/b lag_hours"].value == 3.0
    assert not window.passed and str(window.description).startswith("silver/b: replay window lost")
    assert window.metadata["input"].value == "silver/b"
    assert (
        window.metadata["silver/a headroom_hours"].value,
        window.metadata["silver/b headroom_hours"].value,
    ) == (100.0, 0.0)


def test_only_assets_written_by_the_watermark_io_manager_are_consumers() -> None:
    @dg.asset
    def plain() -> None:
        """Written by the default IO manager."""

    with pytest.raises(dg.DagsterInvalidDefinitionError, match="io_manager_key='watermark_io"):
        ConsumerAsset.of(plain)
