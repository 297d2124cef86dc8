"""Python transforms the modeling tests and the bad-input catalogue name in their specs
(`transform: cdf_platform_testkit.transforms:<function>`)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)


def conform_people(frame: DataFrame) -> DataFrame:
    """Row-level conforming: a capitalised name and an amount band."""
    return frame.withColumns(
        {
            "name": F.initcap("name"),
            "band": F.when(F.col("amount") >= 20, F.lit("high")).otherwise(F.lit("low")),
        }
    )


def total_per_name(frame: DataFrame) -> DataFrame:
    """An aggregation: many bronze rows per output row (refused)."""
    return frame.groupBy("name").agg(F.sum("amount").alias("amount"))


def shift_key(frame: DataFrame) -> DataFrame:
    """A changed key (refused)."""
    return frame.withColumn("id", F.col("id") + 1)


def keep_rich(frame: DataFrame) -> DataFrame:
    """A filter inside a transform (refused: `where` turns dropped rows into deletes)."""
    return frame.filter(F.col("amount") > 10)


def needs_a_lookup(frame: DataFrame) -> DataFrame:
    """A transform that fails in Python before it builds anything (refused, named)."""
    segments: dict[str, str] = {}
    return frame.withColumn("segment", F.lit(segments["retail"]))
