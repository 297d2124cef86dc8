"""What a Spark engineer would write instead of the platform, on the same silver layout.

- `handwritten_merge`: a batch CDF read of the pinned range, dedup with `row_number()` over the
  key by `_commit_version` descending, and a MERGE (no watermark bookkeeping, no checks).
- `streaming_merge`: Structured Streaming `readChangeFeed` from the same start version,
  `trigger(availableNow=True)`, the same dedup + MERGE in `foreachBatch`, a fresh checkpoint.

Both write `_source_commit_version` like the platform, so the three silvers compare row for row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.workload import DATA_COLUMNS, KEY
from cdf_platform.spark.table.silver_layout import SOURCE_VERSION

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def latest_per_key(changes: DataFrame) -> DataFrame:
    """The last change per key: `update_preimage` dropped, highest `_commit_version` first, and
    inside one commit an insert before a delete."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    order = Window.partitionBy(KEY).orderBy(
        F.col("_commit_version").desc(), (F.col("_change_type") != "delete").desc()
    )
    return (
        changes.filter(F.col("_change_type") != "update_preimage")
        .withColumn("_rn", F.row_number().over(order))
        .filter(F.col("_rn") == 1)
        .drop("_rn")
    )


def merge_latest(spark: SparkSession, silver: str, latest: DataFrame) -> None:
    """MERGE one change per key into silver: delete, update or insert."""
    from delta.tables import DeltaTable

    values: dict[str, str | Column] = {c: f"s.{c}" for c in DATA_COLUMNS}
    values[SOURCE_VERSION] = "s._commit_version"
    (
        DeltaTable.forPath(spark, silver)
        .alias("t")
        .merge(latest.alias("s"), f"t.{KEY} = s.{KEY}")
        .whenMatchedDelete("s._change_type = 'delete'")
        .whenMatchedUpdate("s._change_type != 'delete'", set=values)
        .whenNotMatchedInsert("s._change_type != 'delete'", values=values)
        .execute()
    )


def handwritten_merge(spark: SparkSession, bronze: str, silver: str, start: int, end: int) -> None:
    """Bare PySpark: pinned CDF read of [start, end], row_number dedup, MERGE."""
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", start)
        .option("endingVersion", end)
        .load(bronze)
    )
    merge_latest(spark, silver, latest_per_key(changes))


def streaming_merge(
    spark: SparkSession, bronze: str, silver: str, start: int, checkpoint: str
) -> int:
    """Structured Streaming availableNow + foreachBatch MERGE; returns the micro-batch count."""
    batches: list[int] = []

    def apply(batch: DataFrame, batch_id: int) -> None:
        batches.append(batch_id)
        merge_latest(batch.sparkSession, silver, latest_per_key(batch))

    query = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", start)
        .load(bronze)
        .writeStream.foreachBatch(apply)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return len(batches)
