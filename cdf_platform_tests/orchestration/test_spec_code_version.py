"""Dagster sees a spec edit (docs/design.md section 3a): silver's code version is its spec's
fingerprint, so editing the pipelines file and reloading the definitions marks silver stale
("code version changed"), and its next materialization reconciles silver under the new spec;
a consumer asset of the watermark IO manager whose own `code_version` changed gets a full batch
and recomputes exactly, where its old rows would otherwise keep the old code's values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.data_version import (
    CachingStaleStatusResolver,
    StaleCauseCategory,
    StaleStatus,
)
from dagster._core.loader import LoadingContextForTest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import spec_fingerprint
from cdf_platform.core.sql import sql_path
from cdf_platform.orchestration.io_manager.watermark_io_manager import (
    RESOURCE_KEY,
    WatermarkIOManager,
)
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.spark.read.batch import ChangeBatch, MergeRows, ReplaceRows, TableWrite
from cdf_platform.state.consumer_marks import read_consumer_marks
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    incremental_tick,
    lake_defs,
    materialization,
    materialize,
    table_rows,
)

SILVER_ORDERS = silver_key("orders")


def _stale_status(defs: dg.Definitions, instance: dg.DagsterInstance) -> tuple[Any, list[Any]]:
    resolver = CachingStaleStatusResolver(
        instance, defs.resolve_asset_graph(), LoadingContextForTest(instance)
    )
    causes = resolver.get_stale_causes(SILVER_ORDERS)
    return resolver.get_status(SILVER_ORDERS), causes


def _code_version(defs: dg.Definitions) -> str | None:
    return defs.resolve_asset_graph().get(SILVER_ORDERS).code_version


def test_editing_the_pipelines_file_changes_silvers_code_version_and_its_run_reconciles(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze, silver = str(lake / "bronze" / "orders"), str(lake / "silver" / "orders")
    bronze_batch(defs, "orders", instance, 30)
    materialize(defs, SILVER_ORDERS, instance=instance)
    before = _code_version(defs)
    assert before == spec_fingerprint(PipelineSpec(**ORDERS))
    assert _stale_status(defs, instance)[0] is StaleStatus.FRESH

    # The file is edited (a row filter) and the definitions reloaded, as the code server does.
    edited = {**ORDERS, "where": "order_id % 2 = 0"}
    defs = lake_defs(spark_resource, lake, edited)
    assert _code_version(defs) not in (None, before)
    status, causes = _stale_status(defs, instance)
    assert status is StaleStatus.STALE
    assert [c.category for c in causes] == [StaleCauseCategory.CODE]
    assert "code version" in causes[0].reason

    # Bronze did not move: the incremental sensor still requests one run for the edit, and
    # that run reconciles silver under the new spec.
    (request,) = incremental_tick(defs, instance).run_requests
    assert request.run_key == f"spec:orders:{spec_fingerprint(PipelineSpec(**edited))}"
    result = defs.resolve_job_def("incremental_job").execute_in_process(
        instance=instance, asset_selection=request.asset_selection, tags=request.tags
    )
    done = materialization(result, SILVER_ORDERS)
    assert (done["mode"], done["incident_code"]) == ("rebuild", "SPEC_CHANGED")
    expected = [r for r in table_rows(spark, bronze) if r[0] % 2 == 0]
    assert table_rows(spark, silver) == expected
    assert _stale_status(defs, instance)[0] is StaleStatus.FRESH
    # The record rides in silver's commit metadata, readable with plain SQL too.
    history = spark.sql(f"DESCRIBE HISTORY {sql_path(silver)} LIMIT 1").collect()
    assert spec_fingerprint(PipelineSpec(**edited)) in history[0]["userMetadata"]


GOLD = dg.AssetKey(["gold", "scaled_amounts"])


def _scaled(code_version: str, factor: int) -> dg.AssetsDefinition:
    """A consumer of silver/orders keeping `amount * factor` per order: a new factor is new
    code, declared by a new code version."""

    @dg.asset(
        key=GOLD,
        io_manager_key=RESOURCE_KEY,
        ins={"orders": dg.AssetIn(SILVER_ORDERS)},
        code_version=code_version,
    )
    def scaled_amounts(orders: ChangeBatch) -> TableWrite | None:
        if orders.nothing_new:
            return None
        if orders.full:
            snapshot = orders.snapshot()
            return ReplaceRows(snapshot.select("order_id", (F.col("amount") * factor).alias("x")))
        changes = orders.changes().select(
            "order_id", (F.col("amount") * factor).alias("x"), "_change_type"
        )
        return MergeRows(changes, keys=["order_id"], delete_when="s._change_type = 'delete'")

    return scaled_amounts


def test_a_consumer_whose_code_version_changed_gets_a_full_batch_and_recomputes_exactly(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    """Bronze moves between the two writes: an incremental batch would apply the new factor
    to the changed orders only."""
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    silver, gold = str(lake / "silver" / "orders"), str(lake.joinpath(*GOLD.path))
    bronze_batch(defs, "orders", instance, 20)
    materialize(defs, SILVER_ORDERS, instance=instance)
    io_manager = WatermarkIOManager(spark=spark_resource, lake=LakeLayout(lake_root=str(lake)))
    resources = {RESOURCE_KEY: io_manager}
    metadata = {"path": dg.MetadataValue.path(silver), "keys": "order_id"}
    external = dg.AssetSpec(SILVER_ORDERS, metadata=metadata)
    external = external.with_io_manager_key(RESOURCE_KEY)

    def run(asset: dg.AssetsDefinition) -> dict[str, Any]:
        result = dg.materialize([external, asset], selection=[GOLD], resources=resources)
        return materialization(result, GOLD)

    first = run(_scaled("1", 2))
    assert (first["silver/orders mode"], first["code_version"]) == ("full", "1")
    bronze_batch(defs, "orders", instance, 20)
    materialize(defs, SILVER_ORDERS, instance=instance)
    second = run(_scaled("2", 3))
    assert second["silver/orders mode"] == "full"
    assert "code version changed (1 -> 2)" in second["silver/orders reason"]
    expected = [
        (order, amount * 3) for order, amount in table_rows(spark, silver, "order_id", "amount")
    ]
    assert table_rows(spark, gold, "order_id", "x") == expected
    marks = read_consumer_marks(gold, GOLD.to_user_string())
    assert marks is not None and marks.code_version == "2"
    # The same code again: back to incremental reads.
    bronze_batch(defs, "orders", instance, 20)
    materialize(defs, SILVER_ORDERS, instance=instance)
    third = run(_scaled("2", 3))
    assert third["silver/orders mode"] == "incremental"
    expected = [
        (order, amount * 3) for order, amount in table_rows(spark, silver, "order_id", "amount")
    ]
    assert table_rows(spark, gold, "order_id", "x") == expected
