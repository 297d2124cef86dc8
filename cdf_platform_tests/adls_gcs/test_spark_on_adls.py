"""The Spark half on ADLS (Azurite): a pipeline's initial load and incremental run read bronze
and write silver through hadoop-azure's ABFS connector; the JVM-free side then reads what Spark
wrote. Bronze's batches are written by deltalake (as the demo's are), so the Spark work is the
platform's own: two runs."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from pyspark.sql import SparkSession

from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.run import PipelineRunner
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_testkit.azurite import Azurite
from cdf_platform_testkit.orders_bronze import ORDERS_SCHEMA, write_orders_batch

ORDERS = {"id": "orders", "source": "bronze/orders", "target": "silver/orders"}
COLUMNS = ", ".join(f'"{name}"' for name in ORDERS_SCHEMA)


def _rows(table: str) -> list[tuple[Any, ...]]:
    """The bronze columns of the Delta table `table`, sorted, read by deltalake (no Spark)."""
    from deltalake import DeltaTable, QueryBuilder

    query = QueryBuilder().register("t", DeltaTable(table))
    result = query.execute(f"SELECT {COLUMNS} FROM t ORDER BY order_id").read_all()
    return list(zip(*(column.to_pylist() for column in result.columns), strict=True))


def test_a_pipeline_runs_on_adls_through_spark_and_status_reads_it(
    spark: SparkSession, spark_on_azurite: Azurite, tmp_path: Path
) -> None:
    pipelines = tmp_path / "pipelines.yaml"
    entry = {**ORDERS, "keys": ["order_id"], "delete_mode": "hard"}
    pipelines.write_text(yaml.safe_dump({"pipelines": [entry]}), encoding="utf-8")
    lake_root = f"{spark_on_azurite.abfs_root()}/{uuid.uuid4().hex[:12]}"
    layout = LakeLayout(lake_root=lake_root, pipelines_file=str(pipelines))
    spec, control = layout.spec("orders"), layout.control()
    assert spec.source.startswith("abfs://") and control.root.startswith("abfs://")

    write_orders_batch(spec.source, batch_size=20)  # 0 create, 1 insert
    first = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (first.mode, first.end_version) == (RunMode.INITIAL_LOAD, 1)
    write_orders_batch(spec.source, batch_size=20)  # 2: updates, inserts, deletes
    second = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (second.mode, second.start_version, second.end_version) == (RunMode.INCREMENTAL, 2, 2)
    assert second.rows_deleted > 0
    assert _rows(spec.target) == _rows(spec.source)

    # deltalake and obstore read what Spark wrote there (the watermark from silver's txn).
    assert read_silver_state(spec.target, spec.id).watermark == 2
    status = pipeline_status(spec, control)
    assert (status.state, status.watermark, status.version_lag) == (WindowState.OK, 2, 0)
    assert control.read_states()["orders"]["last_commit_version"] == 2
