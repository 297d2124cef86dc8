"""The process's SparkSession: built on demand (never at import) from `SparkSettings`
(`cdf_platform.spark.runtime.session_conf`), in this process or as a Spark Connect client, reused by
later runs, given a lake's object-store options when a run uses it, and checked to be safe.

Example:
    >>> settings = SparkSettings(master="local[2]", shuffle_partitions=2)
    >>> spark = build_spark_session(settings)  # doctest: +SKIP
    >>> spark.sql("SELECT 1").collect()  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlparse

from cdf_platform.core.config import REMOTE_ENV
from cdf_platform.core.errors import EngineUnavailable, RuntimeEnvironmentError, UnsafeSparkConfig
from cdf_platform.core.storage import StorageConfig
from cdf_platform.spark.runtime.engine_wait import connect_when_engine_answers
from cdf_platform.spark.runtime.failures import engine_loss, failure_facts
from cdf_platform.spark.runtime.object_stores import storage_hadoop_conf
from cdf_platform.spark.runtime.session_conf import (
    DELTA_EXTENSION,
    HADOOP_PREFIX,
    SparkSettings,
    connect_conf,
    delta_conf,
    spark_conf,
    starting_conf,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

logger = logging.getLogger(__name__)

MIN_JAVA_MAJOR = 17
# The conf that turns a vanished `_change_data` or data file into silently skipped rows.
IGNORE_MISSING_FILES_CONFS = (
    "spark.sql.files.ignoreMissingFiles",
    "spark.files.ignoreMissingFiles",
)


def java_executable() -> str | None:
    """The Java runtime Spark launches: `$JAVA_HOME/bin/java` when JAVA_HOME is set, else
    `java` on PATH (None: neither)."""
    java_home = os.environ.get("JAVA_HOME")
    return os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")


def java_major_version(java: str | None = None) -> int:
    """The major version of the Java runtime Spark will launch.

    Spark uses `$JAVA_HOME/bin/java` when JAVA_HOME is set, else `java` on PATH.

    Raises:
        RuntimeEnvironmentError: no Java runtime can be found or run.
    """
    if java is None:
        java = java_executable()
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
    it is; the writes set and unset their confs around themselves (`spark.write.merge`).
    """
    return spark if is_connect_session(spark) else spark.newSession()


def engine_listens(remote: str | None) -> bool:
    """Whether something listens at the Spark Connect URL `remote` (always, for a session in
    this process: `remote` None): a client session whose server stopped listening is dropped
    before it is used, so that the next connect waits for the engine instead of failing."""
    if not remote:
        return True
    try:
        _require_listener(remote)
    except EngineUnavailable:
        return False
    return True


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
        # In words: a gRPC error's own first line is its repr (`<_InactiveRpcError of RPC...`).
        facts = failure_facts(err)
        raise EngineUnavailable(
            f"cannot use the Spark Connect server at {remote}: {engine_loss(facts)}",
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


# Held while the process's SparkSession is built: runs side by side share the one JVM. The lock
# is the process's because what it guards is: pyspark keeps one SparkContext per process, and
# a JVM starting points the process's file descriptors 1 and 2 at its log (`jvm_output_to`).
_BUILD_LOCK = threading.Lock()


def build_spark_session(
    settings: SparkSettings, report: Callable[[str], None] | None = None
) -> SparkSession:
    """Create (or reuse) the process's SparkSession with Delta configured: in this process,
    or, with `settings.remote`, as a client of a Spark Connect server, waiting up to
    `settings.engine_wait_seconds` for a server that does not answer (`report`, default this
    module's logger, gets the wait's news).

    Raises:
        RuntimeEnvironmentError: no Java 17+ runtime; a Spark Connect server that cannot be
            reached (within the wait) or has no Delta.
        UnsafeSparkConfig: the resulting session ignores missing files.
    """
    if settings.remote:
        remote = settings.remote
        logger.info("connecting to Spark Connect at %s", remote)
        return connect_when_engine_answers(
            lambda: _connect_session(settings),
            remote,
            settings.engine_wait_seconds,
            report or logger.warning,
        )
    require_java()
    with _BUILD_LOCK:
        return _local_session(settings)


def _local_session(settings: SparkSettings) -> SparkSession:
    from pyspark import SparkContext

    # The process-wide context (an active session is per thread), as pyspark itself checks.
    if SparkContext._active_spark_context is not None:
        # One SparkSession per process: later runs in it (a demo's steps, a code server's
        # runs) reuse the one the first started; getOrCreate applies the runtime conf.
        spark = _builder(spark_conf(settings)).getOrCreate()
    else:
        where = f"; its console output goes to {settings.jvm_log}" if settings.jvm_log else ""
        logger.info("starting SparkSession (master=%s)%s", settings.master, where)
        # The driver JVM's options (a short run's) are part of the conf it starts with.
        builder = _builder(starting_conf(settings))
        with jvm_output_to(settings.jvm_log):
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("WARN")
    apply_storage_options(spark, settings.storage, settings.extra_conf)
    assert_safe_spark_config(spark)
    return spark


def _builder(conf: Mapping[str, str]) -> SparkSession.Builder:
    """A builder of the process's SparkSession with `conf`."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder


def apply_storage_options(
    spark: SparkSession, storage: StorageConfig, extra_conf: Mapping[str, str] | None = None
) -> None:
    """Give a running session's connectors a lake's object-store options, scoped to their
    buckets and accounts (`storage_hadoop_conf`).

    A session started by `build_spark_session` has its settings' from its start
    (`spark.hadoop.*`); this adds another lake's when the process's session serves it too,
    and serves a session built elsewhere (a notebook's).
    Spark reads `spark.hadoop.*` only when its context starts, so they go into the context's
    Hadoop conf, which every session of the process and every new file system instance reads
    (a bucket's options count from the first time Spark opens that bucket in the process).
    Over Spark Connect the server's own conf applies and nothing is set here.

    Args:
        spark: The session.
        storage: The lake's object-store options (resolved, `Lake.storage`).
        extra_conf: Spark conf that wins over the storage options, as in `spark_conf`: a
            `spark.hadoop.<key>` there keeps its value.
    """
    if is_connect_session(spark):
        return
    conf = storage_hadoop_conf(storage)
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
