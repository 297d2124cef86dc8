"""SparkSession construction with Delta Lake configured, and the checks that make it safe.

The session is built on demand, never at import. Delta's jars come from Maven Central through
Spark's own package resolution (`spark.jars.packages`), at the coordinate that matches the
installed pyspark and delta-spark.

Example:
    >>> settings = SparkSettings(master="local[2]", shuffle_partitions=2)
    >>> spark = build_spark_session(settings)  # doctest: +SKIP
    >>> spark.sql("SELECT 1").collect()  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlparse

from cdf_platform.core.active_storage import storage_config_in_use
from cdf_platform.core.config import REMOTE_ENV
from cdf_platform.core.errors import EngineUnavailable, RuntimeEnvironmentError, UnsafeSparkConfig
from cdf_platform.spark.object_stores import (
    object_store_conf,
    object_store_schemes,
    storage_hadoop_conf,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

logger = logging.getLogger(__name__)

MIN_JAVA_MAJOR = 17
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
# spark-submit puts this variable's options on the driver's command line before
# `spark.driver.extraJavaOptions`.
SUBMIT_OPTS_ENV = "SPARK_SUBMIT_OPTS"
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
# The conf that turns a vanished `_change_data` or data file into silently skipped rows.
IGNORE_MISSING_FILES_CONFS = (
    "spark.sql.files.ignoreMissingFiles",
    "spark.files.ignoreMissingFiles",
)


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
            object store among them (s3://, s3a://, abfss://, gs://), and each one the storage
            configuration in use names (`cdf_platform.core.active_storage`), gets its
            connector jars and conf (`cdf_platform.spark.object_stores`); local locations add
            nothing.
        extra_conf: Any further Spark conf, applied last.
        jvm_log: A file that gets the console output of the JVM this process starts (Ivy's
            dependency resolution, log4j warnings, Java stack traces the JVM prints), so a
            terminal shows the platform's own progress; None: the JVM writes to this process's
            stdout and stderr (a Dagster run captures them in its compute logs).
        short_run: The driver JVM this process starts serves one short run (a small
            incremental change set in a run process): it starts with SHORT_RUN_JAVA_OPTIONS,
            unless driver JVM options are set anywhere already (`short_run_java_options`).
    """

    master: str = "local[*]"
    remote: str | None = None
    app_name: str = "cdf_platform"
    ui_enabled: bool = False
    shuffle_partitions: int = 8
    driver_memory: str = "4g"
    storage_locations: tuple[str, ...] = ()
    extra_conf: dict[str, str] = field(default_factory=dict)
    jvm_log: str | None = None
    short_run: bool = False


def delta_maven_coordinate() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark and delta-spark.

    delta-spark >= 4.1 publishes one artifact per Spark minor version
    (`io.delta:delta-spark_<spark major.minor>_2.13:<delta version>`).
    """
    spark_version = importlib.metadata.version("pyspark")
    delta_version = importlib.metadata.version("delta-spark")
    spark_minor = ".".join(spark_version.split(".")[:2])
    return f"io.delta:delta-spark_{spark_minor}_2.13:{delta_version}"


def java_major_version(java: str | None = None) -> int:
    """The major version of the Java runtime Spark will launch.

    Spark uses `$JAVA_HOME/bin/java` when JAVA_HOME is set, else `java` on PATH.

    Raises:
        RuntimeEnvironmentError: no Java runtime can be found or run.
    """
    if java is None:
        java_home = os.environ.get("JAVA_HOME")
        java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    if not java or not os.path.exists(java):
        raise RuntimeEnvironmentError(
            "no Java runtime found (Spark 4 needs Java 17 or newer)",
        )
    try:
        completed = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError as err:
        raise RuntimeEnvironmentError(f"cannot run {java}: {err}") from err
    match = re.search(r'version "(\d+)(?:\.(\d+))?', completed.stderr + completed.stdout)
    if not match:
        raise RuntimeEnvironmentError(f"cannot read the version printed by `{java} -version`")
    major = int(match.group(1))
    # Java 8 and older print "1.8.0_x".
    return int(match.group(2) or 0) if major == 1 else major


def require_java() -> int:
    """Fail with a clear message unless a Java 17+ runtime is available; return its major."""
    major = java_major_version()
    if major < MIN_JAVA_MAJOR:
        raise RuntimeEnvironmentError(
            f"Java {major} found, but Spark 4 needs Java {MIN_JAVA_MAJOR} or newer",
        )
    return major


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
    stores its locations and the storage configuration in use name (configured from the
    environment now, with the configured options of each bucket or account on top); local
    masters get parallelism sized to their cores; `extra_conf` overrides anything. The
    in-memory catalog's warehouse is a temp folder unless the conf or `spark-defaults.conf`
    names one (`WAREHOUSE_CONF`).

    Raises:
        InvalidStorageConfig: the configured options cannot be scoped to their buckets.
    """
    storage = storage_config_in_use()
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


CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# Spark Connect's port when the URL names none, and how long a first TCP connect may take.
DEFAULT_CONNECT_PORT = 15002
CONNECT_PROBE_SECONDS = 10.0
# How a run's Spark Connect client retries a call the server does not answer: 6 retries,
# 50 ms growing fourfold up to 4 s (about 12 s in all). pyspark's default waits up to 10
# minutes, during which a run whose engine was killed hangs; failing after seconds hands the
# outage to the run's retries (EngineUnavailable is retryable), which reconnect to the engine
# once it is back, in a session of their own.
CONNECT_RETRIES = 6
CONNECT_MAX_BACKOFF_MS = 4000


def server_command_hint() -> str:
    """How to start a Spark Connect server this platform can use (Delta configured)."""
    confs = " ".join(f"--conf {key}={value}" for key, value in delta_conf().items())
    return f"start it with `spark-submit --class {CONNECT_SERVER_CLASS} {confs}` (docs/clusters.md)"


def is_connect_session(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect client session (no JVM in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _connect_client(spark: SparkSession) -> ConnectSession | None:
    """`spark` as the Spark Connect client session it is, or None for a session in this
    process."""
    if not is_connect_session(spark):
        return None
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    return cast(ConnectSession, spark)


def is_usable(spark: SparkSession) -> bool:
    """Whether `spark` can still run work: a Spark Connect client session is unusable once it
    is stopped, or closed by its client after the server lost it (a restarted server); a
    session in this process always is (its JVM lives as long as the process)."""
    client = _connect_client(spark)
    return client is None or not client.is_stopped


def discard_session(spark: SparkSession) -> None:
    """Forget a Spark Connect client session whose server went away, without asking that
    server anything (its session is gone with it): the next `build_spark_session` opens a new
    one. A session in this process is left alone."""
    client = _connect_client(spark)
    if client is not None:
        client.release_session_on_close = False
        client.stop()


def new_session(spark: SparkSession) -> SparkSession:
    """A session of its own (SQL conf, temporary views) for one run's work, so confs set
    around a write (Delta's txn confs) never reach other work: `newSession()` in this process.

    A Spark Connect client has no `newSession`, and its process holds one server session of
    its own already (a second one's channel can hang the interpreter's exit): it is used as
    it is; the writes set and unset their confs around themselves (`spark.merge`).
    """
    return spark if is_connect_session(spark) else spark.newSession()


def _require_listener(remote: str) -> None:
    """Fail fast when nothing listens at a Spark Connect URL: the client itself retries a
    refused connection for minutes before it gives up."""
    parsed = urlparse(remote)
    host, port = parsed.hostname or "localhost", parsed.port or DEFAULT_CONNECT_PORT
    try:
        socket.create_connection((host, port), timeout=CONNECT_PROBE_SECONDS).close()
    except OSError as err:
        raise EngineUnavailable(
            f"cannot use the Spark Connect server at {remote}: nothing answers at "
            f"{host}:{port} ({err})",
            action=f"check ${REMOTE_ENV} and that the server runs (`cdf-platform engine`)",
        ) from err


def switched_on(spark: SparkSession, key: str) -> bool:
    """Whether the platform's session switch `key` is on: on unless set to `false` (any case)."""
    return str(spark.conf.get(key, "true")).strip().lower() != "false"


@contextmanager
def scoped_conf(spark: SparkSession, confs: dict[str, str]) -> Iterator[None]:
    """Set `confs` on `spark` for the block, then put back what was there (unset or value)."""
    previous = {key: spark.conf.get(key, None) for key in confs}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, before in previous.items():
            if before is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, before)


def _connect_session(settings: SparkSettings) -> SparkSession:
    """The process's Spark Connect session on `settings.remote`, checked to have Delta."""
    remote = settings.remote or ""
    _require_listener(remote)
    try:
        from pyspark.sql import SparkSession
        from pyspark.sql.connect.client.retries import DefaultPolicy

        spark = SparkSession.builder.remote(remote).getOrCreate()
        spark.client.set_retry_policies(
            [DefaultPolicy(max_retries=CONNECT_RETRIES, max_backoff=CONNECT_MAX_BACKOFF_MS)]
        )
        for key, value in connect_conf(settings).items():
            spark.conf.set(key, value)
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
    except ImportError as err:
        raise RuntimeEnvironmentError(
            f"Spark Connect needs pyspark's client libraries: {err}",
            action="install the project with its `connect` extra (pip install -e '.[connect]')",
        ) from err
    except Exception as err:  # grpc errors: the server is down, restarting, or refuses
        raise EngineUnavailable(
            f"cannot use the Spark Connect server at {remote}: {str(err).splitlines()[0]}",
            action=f"check ${REMOTE_ENV} and that the server runs (`cdf-platform engine`)",
        ) from err
    if DELTA_EXTENSION not in extensions:
        raise RuntimeEnvironmentError(
            f"the Spark Connect server at {remote} has no Delta Lake configured "
            f"(spark.sql.extensions={extensions!r})",
            action=server_command_hint(),
        )
    assert_safe_spark_config(spark)
    return spark


@contextmanager
def jvm_output_to(path: str | None) -> Iterator[None]:
    """Point this process's stdout and stderr (file descriptors 1 and 2) at `path` (appended)
    for the block, so a JVM started inside it keeps writing there; Python's own streams are
    flushed and restored after it. Nothing changes when `path` is None."""
    if path is None:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved, strict=True):
            os.dup2(copy, fd)
            os.close(copy)


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


@contextmanager
def submit_opts(options: str | None) -> Iterator[None]:
    """SPARK_SUBMIT_OPTS set to `options` for the block (a driver JVM started inside it gets
    them), then put back; nothing changes when `options` is None."""
    if options is None:
        yield
        return
    previous = os.environ.get(SUBMIT_OPTS_ENV)
    os.environ[SUBMIT_OPTS_ENV] = options
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SUBMIT_OPTS_ENV, None)
        else:
            os.environ[SUBMIT_OPTS_ENV] = previous


# Held while the process's SparkSession is built: runs side by side share the one JVM.
_BUILD_LOCK = threading.Lock()


def build_spark_session(settings: SparkSettings) -> SparkSession:
    """Create (or reuse) the process's SparkSession with Delta configured: in this process,
    or, with `settings.remote`, as a client of a Spark Connect server.

    Raises:
        RuntimeEnvironmentError: no Java 17+ runtime; a Spark Connect server that cannot be
            reached or has no Delta.
        UnsafeSparkConfig: the resulting session ignores missing files.
    """
    if settings.remote:
        logger.info("connecting to Spark Connect at %s", settings.remote)
        return _connect_session(settings)
    require_java()
    with _BUILD_LOCK:
        return _local_session(settings)


def _local_session(settings: SparkSettings) -> SparkSession:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in spark_conf(settings).items():
        builder = builder.config(key, value)
    # The process-wide context (an active session is per thread), as pyspark itself checks.
    if SparkContext._active_spark_context is not None:
        # One SparkSession per process: later runs in it (a demo's steps, a code server's
        # runs) reuse the one the first started; getOrCreate applies the runtime conf.
        spark = builder.getOrCreate()
    else:
        where = f"; its console output goes to {settings.jvm_log}" if settings.jvm_log else ""
        logger.info("starting SparkSession (master=%s)%s", settings.master, where)
        options = short_run_java_options(settings) if settings.short_run else None
        with jvm_output_to(settings.jvm_log), submit_opts(options):
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("WARN")
    apply_storage_options(spark, settings.extra_conf)
    assert_safe_spark_config(spark)
    return spark


def apply_storage_options(spark: SparkSession, extra_conf: Mapping[str, str] | None = None) -> None:
    """Give a running session's connectors the storage options in use, scoped to their
    buckets and accounts (`storage_hadoop_conf`).

    A session started by `build_spark_session` has them from its start (`spark.hadoop.*`);
    this adds the ones put in use since, and serves a session built elsewhere (a notebook's).
    Spark reads `spark.hadoop.*` only when its context starts, so they go into the context's
    Hadoop conf, which every session of the process and every new file system instance reads
    (a bucket's options count from the first time Spark opens that bucket in the process).
    Over Spark Connect the server's own conf applies and nothing is set here.

    Args:
        spark: The session.
        extra_conf: Spark conf that wins over the storage options, as in `spark_conf`: a
            `spark.hadoop.<key>` there keeps its value.
    """
    if is_connect_session(spark):
        return
    conf = storage_hadoop_conf(storage_config_in_use())
    for key, value in (extra_conf or {}).items():
        if key.startswith(HADOOP_PREFIX) and key[len(HADOOP_PREFIX) :] in conf:
            conf[key[len(HADOOP_PREFIX) :]] = value
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in conf.items():
        hadoop.set(key, value)


def assert_safe_spark_config(spark: SparkSession) -> None:
    """Refuse a session that would turn a lost replay window into silent data loss.

    With `spark.sql.files.ignoreMissingFiles=true`, a CDF read whose `_change_data` or data
    files were vacuumed returns the rows that remain and drops the rest without an error.

    Raises:
        UnsafeSparkConfig: the session ignores missing files.
    """
    for key in IGNORE_MISSING_FILES_CONFS:
        value = spark.conf.get(key, "false")
        if value is not None and value.strip().lower() == "true":
            raise UnsafeSparkConfig(f"the Spark session sets {key}=true", action=f"unset {key}")
