"""VACUUM past Delta's retention check, to lose change files on purpose.

Example:
    >>> vacuum_retain_zero(spark, "/tmp/lake/bronze/orders")  # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from cdf_platform.core.sql import sql_path


def vacuum_retain_zero(spark: SparkSession, path: str) -> None:
    """VACUUM every file the current version does not need (change files included), with
    Delta's retention check off in a separate session (the shared one keeps it on)."""
    session = spark.newSession()
    session.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    session.sql(f"VACUUM {sql_path(path)} RETAIN 0 HOURS")
