"""Spark for tests and benchmarks: the tests' small local config, and sessions with a
conf of their own handed to the platform.

Example:
    >>> TEST_SPARK_CONF["spark.sql.adaptive.enabled"]
    'false'
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import SparkSession

# Small local config: 2 cores here, so few partitions; no UI.
TEST_SPARK_CONF = {
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "2",
    # VACUUM lists files with this many tasks (10,000 by default): seconds wasted per VACUUM.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    # Tables of a few rows: adaptive re-planning costs more than it saves on them. Runs in
    # subprocesses (CLI, clusters, killed runs, the bench's no-op) keep Spark's default, on.
    "spark.sql.adaptive.enabled": "false",
    # No generated code: on tables of a few rows, compiling it costs more than it saves. A
    # profile of repeated small runs (JFR, 12 rounds of load, UPDATE, DELETE and incremental
    # MERGE) had about half of the task threads' CPU in Janino and in the regex that strips
    # comments from the generated source; interpreted, an incremental run took 2.1-2.8 s
    # instead of 3.1-3.7. Subprocess runs keep Spark's default (codegen on), so the platform's
    # production path is still exercised by the CLI, cluster and Dagster-run tests.
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


class SessionsWithConf:
    """Stands in for the session a `spark_factory` returns: the platform calls `newSession()`
    on it, and gets a session with `conf` set (how the tuning variants reach the platform)."""

    def __init__(self, spark: SparkSession, conf: Mapping[str, str]) -> None:
        self._spark = spark
        self._conf = dict(conf)

    def newSession(self) -> SparkSession:  # noqa: N802 (SparkSession's API)
        session = self._spark.newSession()
        for key, value in self._conf.items():
            session.conf.set(key, value)
        return session
