"""The Dagster resources: where the lake and its pipelines are (`LakeLayout`), and one lazily
created, Delta-configured SparkSession per process (`SparkResource`).

`from_environment()` builds each from the environment when the definitions load (never at
import): a field whose variable is set is a `dg.EnvVar` (the UI shows the variable's name, and a
run reads its value when it starts), the others take the embedded defaults. A relative lake or
control root (a literal, or an `EnvVar`'s value when it is read) is resolved once to its
absolute path (`cdf_platform.core.config.resolve_root`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, field_validator

from cdf_platform.core.config import (
    CONTROL_ROOT_ENV,
    DEFAULT_MASTER,
    DEFAULT_PIPELINES_FILE,
    LAKE_ROOT_ENV,
    MASTER_ENV,
    PIPELINES_FILE_ENV,
    REMOTE_ENV,
    control_root_under,
    embedded_lake_root,
    resolve_root,
)
from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.spec import PipelineSpec, storage_locations
from cdf_platform.core.spec_file import find_spec, load_specs
from cdf_platform.spark.session import SparkSettings, build_spark_session
from cdf_platform.state.control import ControlTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _from_env(name: str, default: str) -> str:
    """`dg.EnvVar(name)` when the variable is set, else `default`."""
    return dg.EnvVar(name) if os.environ.get(name) else default


class LakeLayout(dg.ConfigurableResource):
    """The pipelines file, the lake root it is resolved against, and the control tables.

    Example:
        >>> layout = LakeLayout(lake_root="/lake", pipelines_file="pipelines.yaml")
        >>> layout.spec("orders").target  # doctest: +SKIP
        '/lake/silver/orders'
        >>> layout.control().read_states()  # doctest: +SKIP
        {'orders': {...}}
    """

    lake_root: str = Field(
        description="Folder (or URI) that relative `source`/`target` locations of the pipelines "
        f"file are resolved against (${LAKE_ROOT_ENV}; default ./lake). A relative folder is "
        "taken from the working directory and made absolute once."
    )
    control_root: str | None = Field(
        default=None,
        description=f"Folder of the control tables (pipeline_state, load_log) (${CONTROL_ROOT_ENV};"
        " default <lake_root>/_control).",
    )
    pipelines_file: str | None = Field(
        default=None,
        description=f"The pipelines YAML file (${PIPELINES_FILE_ENV}; default ./pipelines.yaml); "
        "None when the pipelines are declared in a Component's defs.yaml.",
    )

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    @field_validator("lake_root", "control_root", "pipelines_file", mode="before")
    @classmethod
    def _resolve(cls, value: object) -> object:
        # Before Dagster reads it, an `EnvVar` holds the variable's name, not a path: it is
        # resolved when the bound layout is built from the value (`bound()`, a run's start).
        if isinstance(value, str) and value and not isinstance(value, dg.EnvVar):
            return resolve_root(value)
        return value

    @classmethod
    def from_environment(cls) -> LakeLayout:
        """The layout the environment configures (see the module docstring)."""
        control_root = os.environ.get(CONTROL_ROOT_ENV)
        return cls(
            lake_root=_from_env(LAKE_ROOT_ENV, embedded_lake_root()),
            control_root=dg.EnvVar(CONTROL_ROOT_ENV) if control_root else None,
            pipelines_file=_from_env(
                PIPELINES_FILE_ENV, str(Path(DEFAULT_PIPELINES_FILE).resolve())
            ),
        )

    def bound(self) -> LakeLayout:
        """This layout with its `dg.EnvVar` fields read now (what a run would see)."""
        return self.process_config_and_initialize()

    def control(self) -> ControlTable:
        """The control tables (state and load log)."""
        return ControlTable(self.control_root or control_root_under(self.lake_root))

    def specs(self) -> list[PipelineSpec]:
        """Every pipeline of the pipelines file, locations resolved under the lake root.

        Raises:
            InvalidPipelineSpec: the file is missing or holds an invalid spec, or the layout
                names no file (the pipelines are declared in a Component's defs.yaml).
        """
        if self.pipelines_file is None:
            raise InvalidPipelineSpec(
                "this lake layout names no pipelines file",
                action="read the pipelines from the Component's defs.yaml, or set "
                f"pipelines_file (${PIPELINES_FILE_ENV})",
            )
        return load_specs(Path(self.pipelines_file), lake_root=self.lake_root)

    def spec(self, pipeline_id: str) -> PipelineSpec:
        """The resolved spec of `pipeline_id`.

        Raises:
            InvalidPipelineSpec: no such pipeline (or the file is invalid).
        """
        return find_spec(self.specs(), pipeline_id)

    def storage_locations(self) -> list[str]:
        """Every location the pipelines touch: lake and control roots, sources and targets."""
        return storage_locations(self.specs(), self.lake_root, self.control().root)

    def table_path(self, layer: str, table: str) -> str:
        """Where a platform-owned table `layer/table` (e.g. gold/...) lives under the lake."""
        return f"{self.lake_root.rstrip('/')}/{layer}/{table}"


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
        default=DEFAULT_MASTER, description=f"Spark master URL (${MASTER_ENV}; default local[*])."
    )
    remote: str | None = Field(
        default=None,
        description=f"Spark Connect URL, e.g. sc://spark-connect:15002 (${REMOTE_ENV}): the "
        "session is a client of that server, whose own configuration gives the master, Delta's "
        "jars and the store connectors. Unset: Spark runs in the process on `master`.",
    )
    app_name: str = Field(default="cdf_platform", description="Spark application name.")
    ui_enabled: bool = Field(default=False, description="Start the Spark UI.")
    shuffle_partitions: int = Field(
        default=8, ge=1, description="spark.sql.shuffle.partitions (keep small on a laptop)."
    )
    driver_memory: str = Field(default="4g", description="spark.driver.memory.")
    storage_locations: list[str] = Field(
        default_factory=list,
        description="Locations the session reads and writes (lake and control roots, tables "
        "outside them): an object-store URI among them (s3://, s3a://) makes Spark load that "
        "store's connector jars and configure it from the environment (AWS_*). A local lake "
        "loads nothing extra.",
    )

    jvm_log: str | None = Field(
        default=None,
        description="A file for the console output of the JVM this process starts (Ivy, log4j "
        "warnings); default: the run's own stdout/stderr, which Dagster keeps as compute logs.",
    )

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    @classmethod
    def from_environment(cls, **fields: Any) -> SparkResource:
        """The resource with the master (or Spark Connect URL) the environment configures,
        and `fields`."""
        remote = dg.EnvVar(REMOTE_ENV) if os.environ.get(REMOTE_ENV) else None
        return cls(master=_from_env(MASTER_ENV, DEFAULT_MASTER), remote=remote, **fields)

    def settings(self) -> SparkSettings:
        """The engine-level settings this resource stands for."""
        return SparkSettings(
            master=self.master,
            remote=self.remote or None,
            app_name=self.app_name,
            ui_enabled=self.ui_enabled,
            shuffle_partitions=self.shuffle_partitions,
            driver_memory=self.driver_memory,
            storage_locations=tuple(self.storage_locations),
            extra_conf={key: str(value) for key, value in self.spark_config.items()},
            jvm_log=self.jvm_log,
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
