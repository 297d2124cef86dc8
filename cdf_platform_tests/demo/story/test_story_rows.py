"""The demo's own oracle: the rows it compares silver and bronze by, read without Spark, agree
with what Spark reads, at a pinned version and without soft-deleted rows."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.core.storage import ENVIRONMENT_ONLY
from cdf_platform.demo.data.source import write_demo_batch
from cdf_platform.demo.story.table_rows import table_rows


def _as_spark_collects(rows: Counter[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Sorted rows, timestamps as PySpark's collect gives them (naive, local time)."""
    return sorted(
        tuple(v.astimezone().replace(tzinfo=None) if isinstance(v, datetime) else v for v in row)
        for row in rows.elements()
    )


def test_rows_at_a_version_and_live_only_match_spark(spark: SparkSession, tmp_path: Path) -> None:
    bronze = str(tmp_path / "orders")
    for _ in range(3):
        write_demo_batch(bronze, "orders", batch_size=40)
    columns = ["order_id", "customer_id", "amount", "status", "updated_at"]

    at_two = spark.read.format("delta").option("versionAsOf", 2).load(bronze).select(*columns)
    expected = sorted(tuple(row) for row in at_two.collect())
    assert _as_spark_collects(table_rows(bronze, columns, ENVIRONMENT_ONLY, version=2)) == expected
    assert table_rows(bronze, columns, ENVIRONMENT_ONLY, version=2) != table_rows(
        bronze, columns, ENVIRONMENT_ONLY
    )  # batch 3 changed rows

    soft = str(tmp_path / "soft")
    frame = (
        spark.read.format("delta")
        .load(bronze)
        .withColumn("_is_deleted", F.expr("order_id % 4 = 0"))
    )
    frame.write.format("delta").save(soft)
    live = frame.filter("NOT _is_deleted").select(*columns)
    assert _as_spark_collects(
        table_rows(soft, columns, ENVIRONMENT_ONLY, live_only=True)
    ) == sorted(map(tuple, live.collect()))
    assert (
        table_rows(soft, columns, ENVIRONMENT_ONLY, live_only=True).total()
        < table_rows(soft, columns, ENVIRONMENT_ONLY).total()
    )
