"""The Spark resource: one lazily created, Delta-configured SparkSession per process."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from cdf_platform.core.config import default_lake_root, default_master
from cdf_platform.spark.session import SparkSettings, build_spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class SparkResource(LazyPySparkResource):
    """A SparkSession with Delta Lake configured, created on first use and reused in the process.

    Built on dagster-pyspark's `LazyPySparkResource`: nothing starts at import or at resource
    initialisation, so runs that find nothing to do never pay for a JVM.

    Example:
        >>> spark_resource = SparkResource(master="local[2]", shuffle_partitions=2)
        >>> spark_resource.spark_session.sql("SELECT 1")  # doctest: +SKIP
    """

    spark_config: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra Spark conf (key -> value), applied after the Delta and platform conf.",
    )
    master: str = Field(
        default_factory=default_master,
        description="Spark master URL; defaults to $CDF_SPARK_MASTER or local[*].",
    )
    lake_root: str = Field(
        default_factory=default_lake_root,
        description="Folder (or URI) under which the platform's Delta tables live; defaults to "
        "$CDF_LAKE_ROOT or ./lake.",
    )
    app_name: str = Field(default="cdf_platform", description="Spark application name.")
    ui_enabled: bool = Field(default=False, description="Start the Spark UI.")
    shuffle_partitions: int = Field(
        default=8, ge=1, description="spark.sql.shuffle.partitions (keep small on a laptop)."
    )
    driver_memory: str = Field(default="4g", description="spark.driver.memory.")

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def settings(self) -> SparkSettings:
        """The engine-level settings this resource stands for."""
        return SparkSettings(
            master=self.master,
            app_name=self.app_name,
            ui_enabled=self.ui_enabled,
            shuffle_partitions=self.shuffle_partitions,
            driver_memory=self.driver_memory,
            extra_conf={key: str(value) for key, value in self.spark_config.items()},
        )

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = build_spark_session(self.settings())

    @property
    def spark_session(self) -> SparkSession:
        self._init_session()
        assert self._spark_session is not None
        return self._spark_session

    @property
    def started(self) -> bool:
        """Whether this resource has created its SparkSession."""
        return self._spark_session is not None
