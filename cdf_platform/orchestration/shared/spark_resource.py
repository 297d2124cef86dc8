"""The Spark resource: one lazily created, Delta-configured SparkSession per process, local,
on a cluster or over Spark Connect (`SparkResource`).

`from_environment()` builds it from the environment when the definitions load (never at
import): a field whose variable is set is a `dg.EnvVar` (the UI shows the variable's name, and a
run reads its value when it starts), the others take the embedded defaults.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from cdf_platform.core.config import DEFAULT_MASTER, MASTER_ENV, REMOTE_ENV, LakeEnvironment
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.orchestration.shared.resources import env_field
from cdf_platform.orchestration.shared.storage_options_config import StorageOptionsConfig
from cdf_platform.spark.runtime.engine_wait import DEFAULT_ENGINE_WAIT_SECONDS
from cdf_platform.spark.runtime.session import (
    apply_storage_options,
    build_spark_session,
    discard_session,
    engine_listens,
    is_connect_session,
    is_usable,
)
from cdf_platform.spark.runtime.session_conf import SparkSettings

logger = logging.getLogger(__name__)

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
        "store's connector jars and configure it from the environment (AWS_*) and the lake's "
        "storage options (per bucket or account). A local lake loads nothing extra.",
    )
    storage: dict[str, StorageOptionsConfig] = Field(
        default_factory=dict,
        description="Object-store options by location prefix the session's connectors get "
        "from its start, scoped to their buckets and accounts (the platform's definitions "
        "give their lake's). A platform step adds the options of the lake it serves when it "
        "uses the session.",
    )

    lean_short_runs: bool = Field(
        default=True,
        description="When a small incremental silver run (change files of at most 256 MiB) is "
        "what starts this process's local driver JVM, start it with the serial collector and "
        "the C1 compiler only (SHORT_RUN_JAVA_OPTIONS): a run process's JVM lives for one "
        "short run. Never when driver JVM options are set elsewhere (spark_config, "
        "spark-defaults.conf, SPARK_SUBMIT_OPTS); later steps of the same run process share "
        "that JVM.",
    )
    engine_wait_seconds: float = Field(
        default=DEFAULT_ENGINE_WAIT_SECONDS,
        ge=0,
        description="With `remote`: how long a run waits for a Spark Connect server that does "
        "not answer (the deployment's engine restarting) before its step fails as "
        "ENGINE_UNAVAILABLE; the run's log says where, since when and how long it waits. 0 "
        "fails at once.",
    )
    jvm_log: str | None = Field(
        default=None,
        description="A file for the console output of the JVM this process starts (Ivy, log4j "
        "warnings); default: the run's own stdout/stderr, which Dagster keeps as compute logs.",
    )

    # The run's log, where a wait for the engine is said (set for a run's execution).
    _log: Any = PrivateAttr(default=None)

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    @classmethod
    def from_environment(cls, **fields: Any) -> SparkResource:
        """The resource with the master (or Spark Connect URL) the environment configures,
        and `fields`."""
        env = LakeEnvironment.resolve()
        remote = env_field(env.remote) if env.remote else None
        return cls(master=env_field(env.master), remote=remote, **fields)

    def settings(self, *, short_run: bool = False) -> SparkSettings:
        """The engine-level settings this resource stands for; `short_run`: see
        `session_for_run`.

        Raises:
            InvalidStorageConfig: a `storage` option reads a variable that is not set.
        """
        storage = StorageOptionsConfig.to_config(self.storage, "the Spark resource's storage")
        return SparkSettings(
            master=self.master,
            remote=self.remote or None,
            app_name=self.app_name,
            ui_enabled=self.ui_enabled,
            shuffle_partitions=self.shuffle_partitions,
            driver_memory=self.driver_memory,
            storage_locations=tuple(self.storage_locations),
            storage=storage.resolved(os.environ),
            extra_conf={key: str(value) for key, value in self.spark_config.items()},
            jvm_log=self.jvm_log,
            short_run=short_run and self.lean_short_runs,
            engine_wait_seconds=self.engine_wait_seconds,
        )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Keep the run's log: a wait for the engine is said there (nothing starts here)."""
        self._log = context.log

    def _report(self, message: str) -> None:
        if self._log is not None:
            self._log.warning(message)
        else:
            logger.warning(message)

    def _init_session(self) -> None:
        self._session()

    def _session(
        self, short_run: bool = False, storage: StorageConfig = ENVIRONMENT_ONLY
    ) -> SparkSession:
        """The session (built now if there is none, or its server lost it), its connectors
        given `storage` too: in its conf from its start when this resource configures no
        storage of its own, else in its Hadoop conf."""
        if self._spark_session is not None and not (
            is_usable(self._spark_session) and engine_listens(self.remote)
        ):
            # Its Spark Connect server lost it, or is away: connect again (and wait for it).
            self.discard_session()
        applied = None
        if self._spark_session is None:
            settings = self.settings(short_run=short_run)
            if not settings.storage.entries:
                settings = replace(settings, storage=storage)
            self._spark_session = build_spark_session(settings, self._report)
            applied = settings.storage
        if storage.entries and storage is not applied:
            extra = {key: str(value) for key, value in self.spark_config.items()}
            apply_storage_options(self._spark_session, storage, extra)
        return self._spark_session

    def discard_session(self) -> None:
        """Drop the session after its Spark Connect server went away (`EngineUnavailable`), so
        the next use (a step's retry) connects again; a session in this process is kept."""
        if self._spark_session is not None and is_connect_session(self._spark_session):
            discard_session(self._spark_session)
            self._spark_session = None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """At the end of a run, release its Spark Connect session on the server (its temporary
        views and cached change sets go with it); a session in this process ends with it."""
        session = self._spark_session
        if session is not None and is_connect_session(session) and is_usable(session):
            session.stop()
            self._spark_session = None

    @property
    def spark_session(self) -> SparkSession:
        return self._session()

    def session_on(self, storage: StorageConfig) -> SparkSession:
        """The session, its connectors given the object-store options `storage` (a lake's,
        `Lake.storage`) scoped to their buckets and accounts."""
        return self._session(storage=storage)

    def session_for_run(self, *, short: bool, storage: StorageConfig) -> SparkSession:
        """The session, for a silver run on the lake whose object-store options are `storage`:
        if this call starts the driver JVM and the run is `short` (`PreparedRun.is_short`),
        the JVM starts lean (`lean_short_runs`)."""
        return self._session(short_run=short, storage=storage)

    @property
    def started(self) -> bool:
        """Whether this resource has created its SparkSession."""
        return self._spark_session is not None
