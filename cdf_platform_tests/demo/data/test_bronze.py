"""Demo bronze assets: deterministic batches, one commit each, inserts + updates + deletes,
written without Spark and read by Spark's change feed."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.demo.data.bronze_assets import bronze_path, demo_bronze_asset
from cdf_platform.orchestration.shared.resources import LakeLayout


def _materialize_orders(lake: Path, batch_size: int) -> dict:
    lake_layout = LakeLayout(lake_root=str(lake), pipelines_file=str(lake / "pipelines.yaml"))
    result = dg.materialize(
        [demo_bronze_asset("orders")],
        resources={"lake": lake_layout},
        run_config={"ops": {"bronze__orders": {"config": {"batch_size": batch_size}}}},
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("bronze__orders")
    return {k: v.value for k, v in mat.metadata.items()}


def test_demo_batches_write_one_commit_each_with_all_change_kinds(
    spark: SparkSession, lake: Path
) -> None:
    first = _materialize_orders(lake, 100)
    assert (first["version"], first["rows_inserted"], first["rows_updated"]) == (1, 100, 0)
    second = _materialize_orders(lake, 100)
    assert (second["version"], second["rows_inserted"]) == (2, 30)
    assert (second["rows_updated"], second["rows_deleted"]) == (60, 10)

    path = bronze_path(str(lake), "orders")
    assert spark.read.format("delta").load(path).count() == 100 + 30 - 10
    kinds = {
        r["_change_type"]: r["n"]
        for r in spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 2)
        .option("endingVersion", 2)
        .load(path)
        .groupBy("_change_type")
        .count()
        .withColumnRenamed("count", "n")
        .collect()
    }
    assert kinds == {"insert": 30, "update_preimage": 60, "update_postimage": 60, "delete": 10}


def test_demo_batches_are_deterministic(spark: SparkSession, tmp_path: Path) -> None:
    tables = []
    for name in ("a", "b"):
        lake = tmp_path / name
        _materialize_orders(lake, 50)
        _materialize_orders(lake, 50)
        frame = spark.read.format("delta").load(bronze_path(str(lake), "orders"))
        tables.append(sorted(tuple(r) for r in frame.collect()))
    assert tables[0] == tables[1]
