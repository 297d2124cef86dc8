"""What a cdf_platform SparkSession is built from (`SparkSettings`) and the conf it gets: Delta's
jar (from Maven Central through Spark's own package resolution, at the coordinate that matches
the installed pyspark and delta-spark), its extension and catalog, the connectors of the lake's
object stores with the lake's options, parallelism sized to a local master, and the JVM options
of a short run. `cdf_platform.spark.runtime.session` builds the session from it.

Example:
    >>> settings = SparkSettings(master="local[2]", shuffle_partitions=2)
    >>> spark_conf(settings)["spark.sql.shuffle.partitions"]  # doctest: +SKIP
    '2'
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.spark.runtime.object_stores import object_store_conf, object_store_schemes

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
# delta-spark 4.4.0 pulls Hadoop's client jars at 3.4.2 (through unitycatalog-hadoop), beside
# the 3.5.0 ones pyspark ships: two Hadoops on one classpath, and hadoop-aws 3.5.0 must meet
# its own. pyspark's are the ones kept.
DUPLICATE_HADOOP_CLIENT = (
    "org.apache.hadoop:hadoop-client-api",
    "org.apache.hadoop:hadoop-client-runtime",
)
# JVM options for a local Spark driver that lives for one short run (a Dagster run process or
# a CLI run over a small backlog): the serial collector and the C1 compiler only. Such a JVM
# spends most of its CPU on itself (parallel GC threads, C2 compiling code it will barely run);
# a long or large run wants the defaults. A small incremental run that starts the JVM gets
# them (`SparkSettings.short_run`); bench.latency's `local` and `local-default-jvm` scenarios
# measure the difference.
SHORT_RUN_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
# Driver JVM options someone may set in the environment (spark-submit puts this variable's on
# the driver's command line before `spark.driver.extraJavaOptions`).
SUBMIT_OPTS_ENV = "SPARK_SUBMIT_OPTS"
# The driver JVM's options as Spark conf: pyspark hands a starting session's conf to
# spark-submit as `--conf` arguments, and Spark's launcher puts this key's value on the driver
# JVM's command line (`SparkSubmitCommandBuilder`, client mode).
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
_JAVA_OPTIONS_ENV = (SUBMIT_OPTS_ENV, "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS")
# An entry of a Java properties file (`key value`, `key=value` or `key: value`; not a comment).
_PROPERTY = re.compile(r"^[ \t]*([^#!\s=:][^\s=:]*)[ \t]*[=:\s][ \t]*(.*)$")
# Where a session started here keeps the default schema of its in-memory catalog, unless the
# Spark conf or spark-defaults.conf names one (a metastore's): Spark's default, `spark-warehouse`
# in the working directory, would litter the folder a run process starts in (a code server's).
WAREHOUSE_CONF = "spark.sql.warehouse.dir"
# Spark conf under this prefix is Hadoop conf (read when the context starts).
HADOOP_PREFIX = "spark.hadoop."


@dataclass(frozen=True)
class SparkSettings:
    """What a cdf_platform SparkSession is built from.

    Attributes:
        master: Spark master URL (`local[*]`, `spark://host:7077`, ...).
        remote: A Spark Connect URL (`sc://host:15002`): the session is a client of that
            server, and the master, jars, driver memory and store connectors are the server's
            own configuration (see `connect_conf`). None: Spark runs in this process.
        app_name: Name shown in the Spark UI and cluster manager.
        ui_enabled: Start the Spark UI (off by default: it costs start-up time and a port).
        shuffle_partitions: `spark.sql.shuffle.partitions`; small for a laptop.
        driver_memory: `spark.driver.memory`, applied when this process starts the JVM.
        storage_locations: Lake and control roots and tables the session will touch: each
            object store among them (s3://, s3a://, abfss://, gs://), and each one `storage`
            names, gets its connector jars and conf (`cdf_platform.spark.runtime.object_stores`);
            local locations add nothing.
        storage: The lake's object-store options (resolved), given to the connectors scoped
            to their buckets and accounts (`Lake.storage`; default: the environment's alone).
        extra_conf: Any further Spark conf, applied last.
        jvm_log: A file that gets the console output of the JVM this process starts (Ivy's
            dependency resolution, log4j warnings, Java stack traces the JVM prints), so a
            terminal shows the platform's own progress; None: the JVM writes to this process's
            stdout and stderr (a Dagster run captures them in its compute logs).
        short_run: The driver JVM this process starts serves one short run (a small
            incremental change set in a run process): it starts with SHORT_RUN_JAVA_OPTIONS,
            unless driver JVM options are set anywhere already (`short_run_java_options`).
        engine_wait_seconds: With `remote`: how long connecting waits for a Spark Connect
            server that does not answer (the deployment's engine restarting) before it fails
            (`cdf_platform.spark.runtime.engine_wait`); 0 fails at once.
    """

    master: str = "local[*]"
    remote: str | None = None
    app_name: str = "cdf_platform"
    ui_enabled: bool = False
    shuffle_partitions: int = 8
    driver_memory: str = "4g"
    storage_locations: tuple[str, ...] = ()
    storage: StorageConfig = ENVIRONMENT_ONLY
    extra_conf: dict[str, str] = field(default_factory=dict)
    jvm_log: str | None = None
    short_run: bool = False
    engine_wait_seconds: float = 0.0


def delta_maven_coordinate() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark and delta-spark.

    delta-spark >= 4.1 publishes one artifact per Spark minor version
    (`io.delta:delta-spark_<spark major.minor>_2.13:<delta version>`).
    """
    spark_version = importlib.metadata.version("pyspark")
    delta_version = importlib.metadata.version("delta-spark")
    spark_minor = ".".join(spark_version.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{delta_version}"


def local_cores(master: str) -> int | None:
    """The cores of a `local`, `local[N]` or `local[*]` master; None for a cluster master."""
    match = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if match is None:
        return None
    count = match.group(1)
    if count is None:
        return 1
    return os.cpu_count() or 1 if count == "*" else max(int(count), 1)


def _local_conf(cores: int) -> dict[str, str]:
    """Parallelism that fits a local master's cores.

    Delta rebuilds a table's state from its log with `snapshotPartitions` tasks (default 50)
    in every job that opens a snapshot, and VACUUM lists files with
    `parallelPartitionDiscovery.parallelism` tasks (default 10000): on a few cores that
    scheduling dominates small runs (bench: an incremental run at 1M rows takes about twice as
    long with the defaults).
    """
    width = str(max(2, cores))
    return {
        "spark.databricks.delta.snapshotPartitions": width,
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": width,
    }


def delta_conf(packages: tuple[str, ...] = (), excludes: tuple[str, ...] = ()) -> dict[str, str]:
    """What any Spark that runs the platform's work needs for Delta: the jar (from Maven
    Central, beside `packages`, without `excludes`), its session extension and catalog. A Spark
    Connect server is started with it."""
    return {
        "spark.jars.packages": ",".join((delta_maven_coordinate(), *packages)),
        "spark.jars.excludes": ",".join((*DUPLICATE_HADOOP_CLIENT, *excludes)),
        "spark.sql.extensions": DELTA_EXTENSION,
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
    }


def _session_conf(settings: SparkSettings) -> dict[str, str]:
    """The session-level part of the conf, set in process and over Spark Connect alike."""
    return {
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        # Commit timestamps, `_deleted_at` and lag hours are compared across machines: UTC.
        "spark.sql.session.timeZone": "UTC",
    }


def spark_conf(settings: SparkSettings) -> dict[str, str]:
    """The full Spark conf for `settings`, Delta included, and the connectors of the object
    stores its locations and its storage configuration name (configured from the
    environment now, with the configured options of each bucket or account on top); local
    masters get parallelism sized to their cores; `extra_conf` overrides anything. The
    in-memory catalog's warehouse is a temp folder unless the conf or `spark-defaults.conf`
    names one (`WAREHOUSE_CONF`).

    Raises:
        InvalidStorageConfig: the configured options cannot be scoped to their buckets.
    """
    storage = settings.storage
    schemes = object_store_schemes([*settings.storage_locations, *storage.prefixes])
    stores = object_store_conf(schemes, os.environ, storage)
    conf = {
        "spark.master": settings.master,
        "spark.app.name": settings.app_name,
        **delta_conf(stores.packages, stores.excludes),
        "spark.ui.enabled": str(settings.ui_enabled).lower(),
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.memory": settings.driver_memory,
        **_session_conf(settings),
    }
    conf.update(stores.conf)
    cores = local_cores(settings.master)
    if cores is not None:
        conf.update(_local_conf(cores))
    conf.update(settings.extra_conf)
    if WAREHOUSE_CONF not in conf and WAREHOUSE_CONF not in spark_defaults():
        conf[WAREHOUSE_CONF] = str(Path(tempfile.gettempdir(), "cdf_platform", "spark-warehouse"))
    return conf


def connect_conf(settings: SparkSettings) -> dict[str, str]:
    """The conf a Spark Connect session sets on its server session: the session-level part of
    `spark_conf` (shuffle partitions, UTC) and `extra_conf`. The rest (master, jars, Delta's
    extension, store connectors, memory) is fixed when the server starts."""
    return {**_session_conf(settings), **settings.extra_conf}


def starting_conf(settings: SparkSettings) -> dict[str, str]:
    """The conf of a session whose start launches this process's driver JVM: `spark_conf`, and
    for a short run SHORT_RUN_JAVA_OPTIONS as the driver's `spark.driver.extraJavaOptions`,
    unless driver JVM options are set elsewhere (`short_run_java_options`): the options are
    passed to the JVM's launcher with the rest of the conf, not through the environment.

    Raises:
        InvalidStorageConfig: see `spark_conf`.
    """
    conf = spark_conf(settings)
    options = short_run_java_options(settings) if settings.short_run else None
    if options is not None:
        conf[DRIVER_JAVA_OPTIONS] = options
    return conf


def short_run_java_options(settings: SparkSettings) -> str | None:
    """SHORT_RUN_JAVA_OPTIONS for the driver of `settings`, or None when the driver's JVM
    options are someone else's choice: `spark.driver.extraJavaOptions` in the settings or in
    `spark-defaults.conf`, or SPARK_SUBMIT_OPTS, JDK_JAVA_OPTIONS or JAVA_TOOL_OPTIONS in the
    environment (a second garbage collector next to one chosen there would stop the JVM from
    starting)."""
    if DRIVER_JAVA_OPTIONS in settings.extra_conf or any(
        os.environ.get(name, "").strip() for name in _JAVA_OPTIONS_ENV
    ):
        return None
    if DRIVER_JAVA_OPTIONS in spark_defaults():
        return None
    return SHORT_RUN_JAVA_OPTIONS


def spark_home() -> str:
    """The Spark installation pyspark runs (its `bin/`, `jars/` and `conf/`)."""
    from pyspark.find_spark_home import _find_spark_home

    return str(_find_spark_home())


def spark_defaults() -> dict[str, str]:
    """The entries of `spark-defaults.conf` (in `$SPARK_CONF_DIR`, else the Spark installation's
    `conf/`), as Spark reads that Java properties file: `key value`, `key=value` or
    `key: value` per line, `#` and `!` starting comments; empty when there is none."""
    conf_dir = os.environ.get("SPARK_CONF_DIR") or os.path.join(spark_home(), "conf")
    try:
        text = Path(conf_dir, "spark-defaults.conf").read_text(encoding="utf-8")
    except OSError:
        return {}
    entries: dict[str, str] = {}
    for line in text.splitlines():
        found = _PROPERTY.match(line)
        if found is not None:
            entries[found.group(1)] = found.group(2).strip()
    return entries
