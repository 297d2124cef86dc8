"""Shared fixtures: one real SparkSession per test session, one lake folder per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.orchestration.resources import SparkResource

# Small local config: 2 cores here, so few partitions; no UI.
TEST_SPARK_CONF = {
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.adaptive.coalescePartitions.initialPartitionNum": "2",
    # VACUUM lists files with this many tasks (10,000 by default): seconds wasted per VACUUM.
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
}


@pytest.fixture(scope="session")
def spark_resource(tmp_path_factory: pytest.TempPathFactory) -> SparkResource:
    """The Spark resource the tests share; its session is the one `spark` returns."""
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    return SparkResource(
        master="local[2]",
        app_name="cdf_platform_tests",
        shuffle_partitions=2,
        driver_memory="2g",
        spark_config={**TEST_SPARK_CONF, "spark.sql.warehouse.dir": str(warehouse)},
    )


@pytest.fixture(scope="session")
def spark(spark_resource: SparkResource) -> Iterator[SparkSession]:
    """A real SparkSession with Delta configured, started once for the whole test session."""
    session = spark_resource.spark_session
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A fresh lake folder for one test."""
    root = tmp_path / "lake"
    root.mkdir()
    return root
