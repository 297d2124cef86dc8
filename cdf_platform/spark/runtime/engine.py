"""The warm engine of a deployment: Spark's own Spark Connect server, with Delta's package and
the lake's object-store connectors, that runs connect to (`CDF_SPARK_REMOTE`) instead of each
starting a Spark driver JVM of its own.

A run process then only plans (without a JVM) and sends its reads and MERGE to a JVM whose
classes are loaded and whose code is compiled already; many more such runs fit on a machine. The
engine is a process of the deployment like the daemon: `cdf-platform engine` runs it in the
foreground, and becomes the server's JVM (one PID for a supervisor to start, watch and stop).
Each run's session on it is its own (SQL conf, temporary views): the txn confs and tuning a run
sets never reach another run's.

What it is started with (`engine_conf`): the conf a local session of the platform would have
(Delta, the stores the lake names and their options, parallelism sized to a local master's
cores, UTC), plus the server's own: its address, fair scheduling between runs, and how long it
keeps what a run that vanished left (its session, its operations). Keys the operator sets in
`spark-defaults.conf` (loaded too) win over the platform's, except Delta's four, and the
operator's `--conf` wins over both.

Example:
    >>> settings = EngineSettings(remote="sc://127.0.0.1:15002", master="local[2]")
    >>> engine_address(settings.remote)
    ('127.0.0.1', 15002)
    >>> engine_command(settings, Path("/run/cdf/engine.conf"))[-3:]  # doctest: +SKIP
    ['--properties-file', '/run/cdf/engine.conf', '--load-spark-defaults']
"""

from __future__ import annotations

import ipaddress
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from cdf_platform.core.errors import RuntimeEnvironmentError
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.spark.runtime.session import CONNECT_SERVER_CLASS, DEFAULT_CONNECT_PORT
from cdf_platform.spark.runtime.session_conf import (
    SparkSettings,
    delta_conf,
    spark_conf,
    spark_defaults,
    spark_home,
)

DEFAULT_ENGINE_REMOTE = f"sc://127.0.0.1:{DEFAULT_CONNECT_PORT}"
DEFAULT_ENGINE_MEMORY = "4g"
# The server's own settings, beside the platform's session conf.
ENGINE_CONF = {
    # Runs share the engine's cores job by job: a rebuild's long stages do not hold back the
    # short jobs of the runs beside it (FIFO would run them after it).
    "spark.scheduler.mode": "FAIR",
    # A session whose run process died without releasing it (killed) is dropped after this
    # long idle, with what it cached; a run that ends releases its own at once.
    "spark.connect.session.manager.defaultSessionTimeout": "10m",
    # An operation whose client went away (its run process killed mid-MERGE) is interrupted
    # after this; its commit, if it still lands, carries its txn, which a later run's MERGE
    # of the same or a later range then skips or supersedes.
    "spark.connect.execute.manager.detachedTimeout": "1m",
    # Warnings and errors only: INFO logs every operation of every run.
    "spark.log.level": "WARN",
    "spark.ui.enabled": "false",
}


@dataclass(frozen=True)
class EngineSettings:
    """What the engine is started with.

    Attributes:
        remote: The Spark Connect URL the deployment's runs use (`CDF_SPARK_REMOTE`): the
            engine listens on its host and port.
        master: Where the engine's Spark runs (`local[*]`: in its own JVM, all cores; or a
            cluster master).
        driver_memory: The engine JVM's heap (`spark.driver.memory`).
        storage_locations: The lake's locations: each object store among them gets its
            connector and the options `storage` gives it
            (`cdf_platform.spark.runtime.object_stores`).
        storage: The lake's object-store options (resolved, `Lake.storage`).
        conf: The operator's Spark conf, winning over everything else.
    """

    remote: str = DEFAULT_ENGINE_REMOTE
    master: str = "local[*]"
    driver_memory: str = DEFAULT_ENGINE_MEMORY
    storage_locations: tuple[str, ...] = ()
    storage: StorageConfig = ENVIRONMENT_ONLY
    conf: dict[str, str] = field(default_factory=dict)


def engine_address(remote: str) -> tuple[str, int]:
    """The host and port a Spark Connect URL names (port 15002 when it names none).

    Raises:
        RuntimeEnvironmentError: `remote` is not an `sc://host[:port]` URL.
    """
    parsed = urlparse(remote)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise RuntimeEnvironmentError(
            f"{remote!r} is not a Spark Connect URL",
            action="set $CDF_SPARK_REMOTE (or --remote) to sc://<host>:<port>",
        )
    return parsed.hostname, parsed.port or DEFAULT_CONNECT_PORT


def engine_conf(settings: EngineSettings) -> dict[str, str]:
    """The engine's Spark conf (see the module docstring for what wins over what)."""
    host, port = engine_address(settings.remote)
    platform = spark_conf(
        SparkSettings(
            master=settings.master,
            app_name="cdf_platform_engine",
            driver_memory=settings.driver_memory,
            storage_locations=settings.storage_locations,
            storage=settings.storage,
        )
    )
    platform.update(ENGINE_CONF)
    operator = spark_defaults()
    conf = {key: value for key, value in platform.items() if key not in operator}
    # Without these the server cannot serve the platform at all (clients refuse it).
    conf.update(delta_conf_of(platform))
    conf.update(
        {
            "spark.connect.grpc.binding.address": host,
            "spark.connect.grpc.binding.port": str(port),
        }
    )
    conf.update(settings.conf)
    return conf


def delta_conf_of(conf: dict[str, str]) -> dict[str, str]:
    """The entries of `conf` that configure Delta (`delta_conf`'s keys)."""
    return {key: conf[key] for key in delta_conf() if key in conf}


def write_properties(conf: dict[str, str], folder: Path | None = None) -> Path:
    """`conf` as a Java properties file readable by its owner only (it may hold object-store
    credentials, which a command line would show to every user of the machine)."""
    where = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="cdf-engine-"))
    where.mkdir(parents=True, exist_ok=True)
    path = where / "engine.conf"
    lines = [f"{key}={_escape(value)}\n" for key, value in sorted(conf.items())]
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, stat.S_IRUSR | stat.S_IWUSR)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.writelines(lines)
    return path


def _escape(value: str) -> str:
    """A value as a Java properties file reads it back (backslashes and line breaks escaped)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def engine_command(settings: EngineSettings, properties: Path) -> list[str]:
    """The `spark-submit` command line that runs the engine with the conf in `properties`."""
    submit = str(Path(spark_home(), "bin", "spark-submit"))
    return [
        submit,
        "--class",
        CONNECT_SERVER_CLASS,
        "--properties-file",
        str(properties),
        "--load-spark-defaults",
    ]


def engine_environment(settings: EngineSettings) -> dict[str, str]:
    """The environment the engine runs in: this one, with Spark kept on loopback when the
    engine listens there (Spark otherwise binds its driver to a routable address)."""
    env = dict(os.environ)
    host, _ = engine_address(settings.remote)
    if "SPARK_LOCAL_IP" not in env and _is_loopback(host):
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
