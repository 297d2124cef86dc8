"""An outage and a VACUUM break the replay window: the checks job reports it and blocks gold, the
rebuild sensor requests exactly one rebuild (and leaves the FAIL_FAST pipeline to a person), the
rebuild restores silver (and gold follows it incrementally), and the checks pass again; every
evaluation kept numeric lag and headroom."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.remote_origin import (
    RegisteredCodeLocationOrigin,
    RemoteInstigatorOrigin,
    RemoteRepositoryOrigin,
)
from dagster._core.scheduler.instigation import (
    InstigatorState,
    InstigatorStatus,
    InstigatorType,
    SensorInstigatorData,
)
from pyspark.sql import SparkSession

from cdf_platform.core.spec.spec_file import find_spec
from cdf_platform.demo.data.gold_asset import CUSTOMER_ORDER_TOTALS_KEY
from cdf_platform.orchestration.checks.silver_checks import CONSUMER_LAG, REPLAY_WINDOW
from cdf_platform.orchestration.jobs.silver_jobs import rebuild_run_config
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.state.consumer_marks import read_consumer_marks
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    check_figures,
    expected_totals,
    failure_incident,
    lake_defs,
    last_spark_job_id,
    materialization,
    materialize,
    sensor_tick,
    table_rows,
    vacuum_breaking_the_window,
)

STRICT = {**ORDERS, "id": "orders_strict", "target": "silver/orders_strict"}
STRICT["fallback_mode"] = "FAIL_FAST"
DEFAULT_RETENTION_HOURS = 7 * 24.0


def latest_evaluation(result: dg.ExecuteInProcessResult, pipeline_id: str, check: str) -> Any:
    """The evaluation of `check` on `pipeline_id`'s silver asset in `result`."""
    (evaluation,) = [
        e
        for e in result.get_asset_check_evaluations()
        if e.asset_key == silver_key(pipeline_id) and e.check_name == check
    ]
    return evaluation


def figures(evaluation: Any, *names: str) -> tuple[Any, ...]:
    """Metadata values of an evaluation."""
    return tuple(evaluation.metadata[name].value for name in names)


def tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None) -> Any:
    """One evaluation of the real rebuild sensor against `instance`, outside a code location
    (as a person evaluates it: no daemon ticks the incremental sensor)."""
    return sensor_tick(defs, instance, "rebuild_sensor", cursor)


LOCATION = RegisteredCodeLocationOrigin("lake")


def daemon_tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> Any:
    """One evaluation of the rebuild sensor as the daemon runs it: in code location `lake`, where
    the incremental sensor's status is the one stored in `instance` (else its default)."""
    sensor = defs.resolve_sensor_def("rebuild_sensor")
    resources = {key: (defs.resources or {})[key] for key in sensor.required_resource_keys}
    repository = defs.get_repository_def()
    with dg.SensorEvaluationContext(
        instance_ref=None,
        instance=instance,
        repository_name=repository.name,
        repository_def=repository,
        resources=resources,
        code_location_origin=LOCATION,
    ) as context:
        return sensor(context)


def stop_incremental_sensor(defs: dg.Definitions, instance: dg.DagsterInstance) -> None:
    """Store the incremental sensor of code location `lake` as stopped, as the UI does."""
    repository = RemoteRepositoryOrigin(LOCATION, defs.get_repository_def().name)
    origin = RemoteInstigatorOrigin(repository, "incremental_sensor")
    data = SensorInstigatorData(min_interval=30)
    state = InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.STOPPED, data)
    instance.add_instigator_state(state)


def test_lost_window_is_reported_rebuilt_once_and_passes_again(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS, STRICT)
    control = defs.resources["lake"]  # type: ignore[index]
    assert isinstance(control, LakeLayout)
    orders = find_spec(control.specs(), "orders")
    bronze, silver = orders.source, orders.target
    gold = control.table_path("gold", "customer_order_totals")
    checks_job = defs.resolve_job_def("checks_job")

    with dg.instance_for_test() as instance:
        bronze_batch(defs, "orders", instance, 30)  # version 1
        assert defs.resolve_job_def("incremental_job").execute_in_process(instance=instance).success
        gold_before = materialize(defs, CUSTOMER_ORDER_TOTALS_KEY, instance=instance)
        silver_version = materialization(gold_before, CUSTOMER_ORDER_TOTALS_KEY)["end_version"]
        healthy = checks_job.execute_in_process(instance=instance)
        assert figures(latest_evaluation(healthy, "orders", REPLAY_WINDOW), "state") == ("OK",)
        quiet = tick(defs, instance, None)
        assert not quiet.run_requests

        # Outage: bronze moves on while silver is paused, then VACUUM breaks the window.
        bronze_batch(defs, "orders", instance, 30)
        bronze_batch(defs, "orders", instance, 30)
        vacuum_breaking_the_window(spark, bronze)
        status = pipeline_status(orders, control.control())
        assert status.state is WindowState.LOST
        latest = status.latest_version
        assert latest is not None

        spark_jobs = last_spark_job_id(spark)
        broken = checks_job.execute_in_process(instance=instance, raise_on_error=False)
        assert last_spark_job_id(spark) == spark_jobs  # the checks read logs only
        for pipeline_id in ("orders", "orders_strict"):
            lost = latest_evaluation(broken, pipeline_id, REPLAY_WINDOW)
            assert not lost.passed
            assert lost.severity is dg.AssetCheckSeverity.ERROR
            assert figures(lost, "state", "replayable", "problem_code") == (
                "LOST",
                False,
                "WATERMARK_OUTSIDE_RETENTION",
            )
            # bronze's latest version is text (not plotted); the run key reads its digits.
            assert figures(lost, "watermark", "latest_version") == (1, str(latest))
            earliest = lost.metadata["earliest_replayable_version"].value
            assert isinstance(earliest, int) and earliest > 2
            assert lost.metadata["headroom_hours"].value <= 0.0
            # One story per state: where the window starts now, what left it, the repair this
            # pipeline's fallback gives (and no headroom limit: headroom is not the reason).
            description = str(lost.description)
            gone = "version 2" if earliest == 3 else f"versions 2..{earliest - 1}"
            assert (
                f"bronze {gone} left the replay window, which now starts at version {earliest}"
            ) in description
            repair = (
                "FAIL_FAST: read the incident"
                if pipeline_id == "orders_strict"
                else ("SNAPSHOT_REBUILD: the platform repairs it")
            )
            assert repair in description
            assert "limit" not in lost.metadata

        # The blocking check keeps gold from reading silver while the window is lost.
        blocked = materialize(
            defs,
            CUSTOMER_ORDER_TOTALS_KEY,
            checks=(dg.AssetCheckKey(silver_key("orders"), REPLAY_WINDOW),),
            instance=instance,
            raise_on_error=False,
        )
        assert not blocked.get_asset_materialization_events()
        marks = read_consumer_marks(gold, CUSTOMER_ORDER_TOTALS_KEY.to_user_string())
        assert marks is not None and marks.version_of("silver/orders") == silver_version

        # In a code location whose incremental sensor runs, that sensor owns the repair (its
        # own tick saw the loss): the rebuild sensor requests none, even with nothing pending.
        deferred = daemon_tick(defs, instance)
        assert not deferred.run_requests
        assert "repaired by incremental_sensor (running): orders" in str(deferred.skip_reason)
        assert "left for a person (FAIL_FAST): orders_strict" in str(deferred.skip_reason)
        # Stopped by an operator: the rebuild sensor repairs.
        stop_incremental_sensor(defs, instance)
        (own,) = daemon_tick(defs, instance).run_requests
        assert own.run_key == f"rebuild:orders:1:{latest}"

        # A run of the pipeline already queued (the incremental sensor's repair, say): no
        # second run while it is pending; once it ended without repairing, the rebuild.
        job = defs.resolve_job_def("incremental_job")
        queued = instance.create_run_for_job(
            job, asset_selection=frozenset([silver_key("orders")]), tags=dict(job.tags)
        )
        held = tick(defs, instance, None)
        assert not held.run_requests
        assert f"orders (run {queued.run_id[:8]} pending)" in str(held.skip_reason)
        instance.report_run_canceled(queued)

        # One rebuild request for the loss; FAIL_FAST is named and left alone; then silence.
        first = tick(defs, instance, held.cursor)
        (request,) = first.run_requests
        assert request.run_key == f"rebuild:orders:1:{latest}"
        assert request.asset_selection == [silver_key("orders")]
        assert request.tags["cdf_platform/incident_code"] == "WATERMARK_OUTSIDE_RETENTION"
        second = tick(defs, instance, first.cursor)
        assert not second.run_requests
        assert "left for a person (FAIL_FAST): orders_strict" in str(second.skip_reason)

        rebuild_job = defs.resolve_job_def("rebuild_job")
        rebuilt = rebuild_job.execute_in_process(
            instance=instance,
            run_config=request.run_config,
            asset_selection=list(request.asset_selection or []),
            tags=request.tags,
        )
        outcome = materialization(rebuilt, silver_key("orders"))
        assert (outcome["mode"], outcome["end_version"]) == ("rebuild", latest)
        assert outcome["incident_code"] == "WATERMARK_OUTSIDE_RETENTION"
        assert table_rows(spark, silver) == table_rows(spark, bronze)
        assert latest_evaluation(rebuilt, "orders", REPLAY_WINDOW).passed
        # The rebuild reconciled silver by MERGE: gold follows it incrementally, exactly.
        gold_after = materialize(defs, CUSTOMER_ORDER_TOTALS_KEY, instance=instance)
        refresh = materialization(gold_after, CUSTOMER_ORDER_TOTALS_KEY)
        assert (refresh["mode"], refresh["start_version"]) == ("incremental", silver_version + 1)
        assert table_rows(spark, gold) == expected_totals(spark, silver)

        # FAIL_FAST: a rebuild is refused until a person overrides it.
        strict_key = silver_key("orders_strict")
        refused = rebuild_job.execute_in_process(
            instance=instance,
            run_config=rebuild_run_config("orders_strict"),
            asset_selection=[strict_key],
            raise_on_error=False,
        )
        assert not refused.success
        assert not refused.get_asset_materialization_events()
        (failure,) = [e for e in refused.all_events if e.is_step_failure]
        assert "override_fail_fast" in str(failure.step_failure_data.error)
        # The override is refused where the deployment does not permit it (whoever reaches the
        # UI can set it), and nothing is written.
        strict_rebuild = rebuild_run_config("orders_strict", override_fail_fast=True)
        not_permitted = rebuild_job.execute_in_process(
            instance=instance,
            run_config=strict_rebuild,
            asset_selection=[strict_key],
            raise_on_error=False,
        )
        assert not not_permitted.success
        assert not not_permitted.get_asset_materialization_events()
        assert failure_incident(not_permitted) == "DESTRUCTIVE_ACTION_NOT_PERMITTED"
        strict_silver = str(lake / "silver" / "orders_strict")
        control = ControlTable(str(lake / "_control"))
        assert [
            (row["run_id"], row["outcome"]) for row in control.read_maintenance_log(strict_silver)
        ] == [(not_permitted.run_id, "not_permitted")]
        # Permitted by the deployment, it runs, and is recorded with who asked.
        permitted = lake_defs(spark_resource, lake, ORDERS, STRICT, allow_destructive=True)
        overridden = permitted.resolve_job_def("rebuild_job").execute_in_process(
            instance=instance,
            run_config=strict_rebuild,
            asset_selection=[strict_key],
            tags={"dagster/user": "operator@example.com"},
        )
        outcome = materialization(overridden, strict_key)
        assert (outcome["mode"], outcome["override_fail_fast"]) == ("rebuild", True)
        assert outcome["permitted_by"] == "CDF_ALLOW_DESTRUCTIVE=1"
        recorded = control.read_maintenance_log(strict_silver)[-1]
        assert (recorded["run_id"], recorded["job"], recorded["outcome"]) == (
            overridden.run_id,
            "rebuild_job",
            "started",
        )
        assert (recorded["destructive"], recorded["permitted_by"]) == (
            True,
            "CDF_ALLOW_DESTRUCTIVE=1",
        )
        assert json.loads(recorded["tags"])["dagster/user"] == "operator@example.com"
        assert table_rows(spark, str(lake / "silver" / "orders_strict")) == table_rows(
            spark, bronze
        )

        healed = checks_job.execute_in_process(instance=instance)
        for pipeline_id in ("orders", "orders_strict"):
            evaluation = latest_evaluation(healed, pipeline_id, REPLAY_WINDOW)
            assert evaluation.passed
            assert figures(evaluation, "watermark", "latest_version") == (latest, str(latest))
        assert not tick(defs, instance, second.cursor).run_requests

        # Acceptance 5: each evaluation stored its lag and headroom figures as numbers, oldest
        # first: incremental run, healthy checks, outage checks, (blocked gold run,) rebuild run,
        # healed checks.
        int_figure, float_figure = dg.IntMetadataValue, dg.FloatMetadataValue
        assert check_figures(
            instance, silver_key("orders"), CONSUMER_LAG, "version_lag", int_figure
        ) == [0, 0, latest - 1, 0, 0]
        # Two data commits behind; the ALTER TABLE and VACUUM commits are versions, not data.
        assert check_figures(
            instance, silver_key("orders"), CONSUMER_LAG, "data_version_lag", int_figure
        ) == [0, 0, 2, 0, 0]
        assert check_figures(
            instance, silver_key("orders"), CONSUMER_LAG, "watermark", int_figure
        ) == [1, 1, 1, latest, latest]
        # Hours to 2 decimals: this outage lasts seconds, so its lag reads 0.0 h or so.
        lag_hours = check_figures(
            instance, silver_key("orders"), CONSUMER_LAG, "lag_hours", float_figure
        )
        outage = lag_hours.pop(2)
        assert lag_hours == [0.0, 0.0, 0.0, 0.0]
        assert 0.0 <= outage == round(outage, 2)
        headroom = check_figures(
            instance, silver_key("orders"), REPLAY_WINDOW, "headroom_hours", float_figure
        )
        # Caught up: no deadline runs, so the headroom the next commit starts with, the horizon
        # (7 days; never a placeholder, never a 0 that reads as a closed window); lost: 0.
        full = DEFAULT_RETENTION_HOURS
        assert headroom == [full, full, 0.0, 0.0, full, full]
        horizon = check_figures(
            instance, silver_key("orders"), REPLAY_WINDOW, "retention_horizon_hours", float_figure
        )
        assert horizon == [DEFAULT_RETENTION_HOURS] * 6
        replayable = check_figures(
            instance, silver_key("orders"), REPLAY_WINDOW, "replayable", dg.BoolMetadataValue
        )
        assert replayable == [True, True, False, False, True, True]
