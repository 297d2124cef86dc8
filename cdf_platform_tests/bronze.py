"""Small helpers to build bronze tables and read silver in engine tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import sql_path
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.vacuum import vacuum_retain_zero as vacuum_retain_zero


def make_bronze(spark: SparkSession, path: str, rows: list[tuple[Any, ...]] | None = None) -> None:
    """A CDF-enabled bronze table (id BIGINT, name STRING, amount INT), optionally seeded."""
    spark.sql(
        f"CREATE TABLE {sql_path(path)} (id BIGINT, name STRING, amount INT) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    if rows:
        insert(spark, path, rows)


def insert(spark: SparkSession, path: str, rows: list[tuple[Any, ...]]) -> None:
    """One INSERT commit."""
    spark.createDataFrame(rows, "id BIGINT, name STRING, amount INT").write.format("delta").mode(
        "append"
    ).save(path)


def null_key_commit(path: str, key: str = "order_id") -> None:
    """One bronze commit (deltalake, no Spark) of a copy of the table's first row with `key`
    NULL: a DATA_QUALITY problem for silver's next run."""
    table = DeltaTable(path).to_pyarrow_table()
    row = {**table.slice(0, 1).to_pylist()[0], key: None}
    write_deltalake(path, pa.Table.from_pylist([row], schema=table.schema), mode="append")


def sql(spark: SparkSession, path: str, statement: str) -> None:
    """Run `statement` with `{t}` replaced by the table reference."""
    spark.sql(statement.format(t=sql_path(path)))


def drop_column(spark: SparkSession, path: str, column: str) -> None:
    """`ALTER TABLE DROP COLUMN` on bronze, after turning on column mapping (Delta needs it)."""
    sql(
        spark,
        path,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')",
    )
    sql(spark, path, f"ALTER TABLE {{t}} DROP COLUMN {column}")


def set_deleted_file_retention(spark: SparkSession, path: str, interval: str) -> None:
    """Set bronze's `delta.deletedFileRetentionDuration` (e.g. 'interval 1 hours')."""
    sql(
        spark,
        path,
        "ALTER TABLE {t} SET TBLPROPERTIES "
        f"('delta.deletedFileRetentionDuration' = '{interval}')",
    )


def commit_feed(
    spark: SparkSession, path: str, version: int, *columns: str
) -> list[tuple[Any, ...]]:
    """Sorted (id, `_change_type`, *`columns`) of the change feed of the commit `version` of
    the Delta table at `path`."""
    frame = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .option("endingVersion", version)
        .load(path)
    )
    return sorted((r["id"], r["_change_type"], *(r[c] for c in columns)) for r in frame.collect())


def rows(spark: SparkSession, path: str, *columns: str) -> list[tuple[Any, ...]]:
    """Sorted tuples of `columns` (default: all data columns) of the Delta table at `path`."""
    frame = spark.read.format("delta").load(path)
    selected = frame.select(*(columns or [c for c in frame.columns if not c.startswith("_")]))
    return sorted(tuple(r) for r in selected.collect())


def spec_for(lake: Path, **overrides: Any) -> PipelineSpec:
    """A pipeline from `lake/bronze` to `lake/silver` keyed on id."""
    fields: dict[str, Any] = {
        "id": "people",
        "source": str(lake / "bronze"),
        "target": str(lake / "silver"),
        "keys": ["id"],
        "fallback_mode": "FAIL_FAST",
    }
    fields.update(overrides)
    return PipelineSpec(**fields)


def control_for(lake: Path) -> ControlTable:
    """The control tables of a test lake."""
    return ControlTable(str(lake / "_control"))


def assert_converged_after_kill(
    spark: SparkSession, spec: PipelineSpec, control: ControlTable
) -> None:
    """The kill-after-MERGE story (soft deletes; id 1 updated to 11 at version 2, id 2 deleted
    at 3) after its rerun: silver exact, the control table repaired from silver's log."""
    assert rows(spark, spec.target, "id", "amount", "_is_deleted", "_source_commit_version") == [
        (1, 11, False, 2),
        (2, 20, True, 3),
    ]
    assert control.read_states()[spec.id]["last_commit_version"] == 3
    assert control.read_log(spec.id)[-1]["outcome"] == "REPAIRED"
