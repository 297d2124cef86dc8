"""Scenario (d): the replay-window check on long logs, JVM-free versus a Spark history check.

A small real bronze table (versions 0 and 1 written by delta-spark) is extended with synthetic
commits modelled on delta-spark's own (the engine tests' `synthetic_log`): one `add`
per commit, every third commit a `cdc` file, every referenced file present. The JVM-free path is
the platform's `compute_replay_window` + `assess_consumer`. The Spark path is what a Spark
engineer would write: `DESCRIBE HISTORY` and `SHOW TBLPROPERTIES`, then a contiguity and
retention check in Python; it checks less than the platform (no file existence, no CDF or schema
history), so its time is a lower bound for an equivalent Spark check. Delta's table-state cache
is cleared before each Spark repetition, as a fresh check process would start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cdf_platform.core.sql import sql_path
from cdf_platform.deltalog.retention import DEFAULT_DELETED_FILE_RETENTION, parse_interval
from cdf_platform.window.replay_window import assess_consumer, compute_replay_window

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class HistoryVerdict:
    """What the Spark history check concludes."""

    latest_version: int
    contiguous: bool
    earliest_in_retention: int | None


def create_log_table(spark: SparkSession, path: str) -> None:
    """A CDF-enabled table with two real commits (create, one insert) to model the rest on."""
    spark.sql(
        f"CREATE TABLE {sql_path(path)} (id BIGINT, name STRING) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(f"INSERT INTO {sql_path(path)} VALUES (1, 'a')")


def jvm_free_check(path: str) -> bool:
    """The platform's check: the exact window and a consumer halfway through the log."""
    window = compute_replay_window(path)
    assessment = assess_consumer(window, window.latest_version // 2)
    return assessment.replayable


def clear_delta_cache(spark: SparkSession) -> None:
    """Drop delta-spark's cached table states (`DeltaLog.clearCache()`)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def spark_history_check(spark: SparkSession, path: str) -> HistoryVerdict:
    """DESCRIBE HISTORY + SHOW TBLPROPERTIES: versions contiguous, and the earliest version
    still inside `delta.deletedFileRetentionDuration`."""
    table = sql_path(path)
    history = spark.sql(f"DESCRIBE HISTORY {table}").select("version", "timestamp").collect()
    properties = {
        row["key"]: row["value"] for row in spark.sql(f"SHOW TBLPROPERTIES {table}").collect()
    }
    raw = properties.get("delta.deletedFileRetentionDuration")
    retention = parse_interval(raw) if raw else DEFAULT_DELETED_FILE_RETENTION
    cutoff = datetime.now(UTC) - retention
    versions = sorted(int(row["version"]) for row in history)
    contiguous = versions == list(range(versions[0], versions[-1] + 1))
    # PySpark returns timestamps as naive datetimes in the local time zone of this process.
    recent = [int(r["version"]) for r in history if r["timestamp"].astimezone(UTC) >= cutoff]
    return HistoryVerdict(versions[-1], contiguous, min(recent) if recent else None)
