"""The Definitions load, validate, and serve the Dagster UI."""

from __future__ import annotations

import logging
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
import yaml

from cdf_platform.definitions import build_defs, defs, warm_definitions
from cdf_platform.demo.demo_definitions import defs as demo_defs
from cdf_platform_testkit.dagster_dev import DAGSTER, PROJECT_ROOT, dagster_dev
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_tests.lake_platform import ORDERS, control_for

# The pipelines of the repository's pipelines.yaml (the demo's) -> their bronze table.
BRONZE_OF = {"orders": "orders", "customers": "customers", "accounts": "accounts_cdc"}


def test_definitions_load_without_starting_spark() -> None:
    from cdf_platform.orchestration.shared.spark_resource import SparkResource

    loaded = defs()
    assert isinstance(loaded, dg.Definitions)
    spark = (loaded.resources or {})["spark"]
    assert isinstance(spark, SparkResource)
    assert not spark.started
    keys = loaded.resolve_asset_graph().get_all_asset_keys()
    assert {dg.AssetKey(["bronze", table]) for table in BRONZE_OF.values()} <= keys


def test_definitions_are_built_again_only_when_the_pipelines_file_or_environment_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A run forked from the warm run worker reuses the worker's definitions; a spec edit or
    another environment gets them built again."""
    pipelines = tmp_path / "pipelines.yaml"
    pipelines.write_text(yaml.safe_dump({"pipelines": [orders_pipeline("a")]}))
    monkeypatch.setenv("CDF_PIPELINES_FILE", str(pipelines))
    monkeypatch.setenv("CDF_LAKE_ROOT", str(tmp_path / "lake"))
    first = defs()
    assert defs() is first
    assert warm_definitions()
    assert defs() is first

    pipelines.write_text(
        yaml.safe_dump({"pipelines": [orders_pipeline("a"), orders_pipeline("b")]})
    )
    edited = defs()
    assert edited is not first
    assert dg.AssetKey(["silver", "b"]) in edited.resolve_asset_graph().get_all_asset_keys()
    monkeypatch.setenv("CDF_AUTOMATION", "off")
    assert defs() is not edited

    pipelines.write_text("pipelines: [{id: broken}]")
    with caplog.at_level(logging.WARNING, logger="cdf_platform.definitions"):
        assert not warm_definitions()  # each run then fails on the file, classified
        assert not warm_definitions()  # not built again: said once
    assert len(caplog.records) == 1 and "do not load" in caplog.records[0].getMessage()
    pipelines.write_text(yaml.safe_dump({"pipelines": [orders_pipeline("a")]}))
    assert warm_definitions()  # fixed: built


def test_asset_graph_runs_bronze_to_silver_with_checks_on_silver() -> None:
    loaded = defs()
    graph = loaded.resolve_asset_graph()
    for pipeline, table in BRONZE_OF.items():
        bronze = graph.get(dg.AssetKey(["bronze", table]))
        assert bronze.is_external and not bronze.is_materializable  # production: never written
        silver = graph.get(dg.AssetKey(["silver", pipeline]))
        assert silver.parent_keys == {bronze.key}
        assert silver.group_name == "silver"
        assert silver.pools == {f"cdf_pipeline_{pipeline}"}
        # Silver writes itself; its consumers load its changes through the watermark IO
        # manager, and so do consumers of bronze.
        assert silver.io_manager_key == "watermark_io_manager"
        assert bronze.io_manager_key == "watermark_io_manager"
        checks = {"consumer_lag", "replay_window", "foreign_writes"}
        assert {key.name for key in silver.check_keys} == checks
        blocking = {key.name: graph.get_check_spec(key).blocking for key in silver.check_keys}
        assert blocking == {"consumer_lag": False, "replay_window": True, "foreign_writes": False}
    assert dg.AssetKey(["gold", "customer_order_totals"]) not in graph.get_all_asset_keys()
    assert set(loaded.resources or {}) == {"spark", "lake", "watermark_io_manager"}


def test_the_overview_hangs_off_the_bronze_tables_and_not_off_silver() -> None:
    """It reads the bronze logs; below silver, a lost window (a blocking check) would stop it."""
    graph = defs().resolve_asset_graph()
    overview = graph.get(dg.AssetKey(["platform", "pipelines"]))
    assert overview.parent_keys == {dg.AssetKey(["bronze", table]) for table in BRONZE_OF.values()}
    assert overview.group_name == "platform"


def test_the_demo_definitions_add_the_demo_writers_and_gold() -> None:
    graph = demo_defs().resolve_asset_graph()
    for pipeline, table in BRONZE_OF.items():
        bronze = graph.get(dg.AssetKey(["bronze", table]))
        assert bronze.is_materializable and not bronze.is_external
        assert graph.get(dg.AssetKey(["silver", pipeline])).parent_keys == {bronze.key}
    gold = graph.get(dg.AssetKey(["gold", "customer_order_totals"]))
    assert gold.parent_keys == {dg.AssetKey(["silver", "orders"])}


def test_every_job_sensor_and_schedule_resolves() -> None:
    loaded = defs()
    for name in ("incremental_job", "rebuild_job", "checks_job"):
        assert loaded.resolve_job_def(name).name == name
    for name in ("incremental_sensor", "rebuild_sensor"):
        assert loaded.resolve_sensor_def(name).name == name
    assert loaded.resolve_schedule_def("checks_schedule").job_name == "checks_job"

    # The checks job evaluates both checks of each pipeline in one op, and refreshes the
    # all-pipelines overview, without Spark.
    checks_job = loaded.resolve_job_def("checks_job")
    nodes = {}
    for node in checks_job.graph.node_defs:
        assert isinstance(node, dg.OpDefinition)
        nodes[node.name] = node.required_resource_keys
    checks = {f"silver__{pipeline}_checks" for pipeline in BRONZE_OF}
    assert set(nodes) == {*checks, "platform__pipelines"}
    assert set().union(*nodes.values()) == {"lake"}
    assert "spark" not in checks_job.required_resource_keys


def test_a_bronze_table_written_elsewhere_is_an_external_asset(tmp_path: Path) -> None:
    payments = {
        **ORDERS,
        "id": "payments",
        "source": "/data/partner/payments_v2",
        "target": "silver/payments",
        "keys": ["payment_id"],
        "bronze_table": "payments",
    }
    graph = build_defs(control_for(tmp_path, payments)).resolve_asset_graph()
    bronze = graph.get(dg.AssetKey(["bronze", "payments"]))
    assert bronze.is_external and not bronze.is_materializable
    assert bronze.metadata["path"].value == "/data/partner/payments_v2"
    assert graph.get(dg.AssetKey(["silver", "payments"])).parent_keys == {bronze.key}
    # No orders pipeline here, so no gold asset fed by it.
    assert dg.AssetKey(["gold", "customer_order_totals"]) not in graph.get_all_asset_keys()


def test_a_real_orders_table_outside_the_lake_gets_no_demo_asset(tmp_path: Path) -> None:
    """A pipeline named like a demo one, on a bronze table elsewhere, is only the platform's:
    an external bronze asset, its silver asset and checks, the all-pipelines overview, and
    nothing of the demo."""
    orders = {**ORDERS, "source": "/mnt/landing/sales/orders", "target": "silver/orders"}
    loaded = build_defs(control_for(tmp_path, orders))
    graph = loaded.resolve_asset_graph()
    assert graph.get_all_asset_keys() == {
        dg.AssetKey(["bronze", "orders"]),
        dg.AssetKey(["silver", "orders"]),
        dg.AssetKey(["platform", "pipelines"]),
    }
    bronze = graph.get(dg.AssetKey(["bronze", "orders"]))
    assert bronze.is_external and not bronze.is_materializable
    assert bronze.metadata["path"].value == "/mnt/landing/sales/orders"
    jobs = {job.name for job in loaded.jobs or []}
    assert not jobs & {"demo_bronze_job", "gold_job"}


@pytest.mark.parametrize("workspace", ["workspace.yaml", "workspace.demo.yaml"])
def test_dagster_definitions_validate_passes(tmp_path: Path, workspace: str) -> None:
    completed = subprocess.run(
        [DAGSTER, "definitions", "validate", "-w", workspace],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "All code locations passed validation" in completed.stdout + completed.stderr


def test_dagster_dev_serves_the_ui_on_loopback(tmp_path: Path) -> None:
    with (
        dagster_dev({"DAGSTER_HOME": str(tmp_path)}) as url,
        urllib.request.urlopen(f"{url}/", timeout=10) as response,
    ):
        assert response.status == 200
        assert b"Dagster" in response.read()
