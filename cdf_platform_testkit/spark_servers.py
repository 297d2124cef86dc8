"""Real Spark servers on loopback for the cluster tests: a standalone master with one worker,
a Spark Connect server with Delta, and a Hive metastore service, each started from the classes
pyspark ships (no Spark or Hive download), on free ports, waited for, and stopped by PID (each
process a `cdf_platform.services.service.Service`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self
from xml.sax.saxutils import escape

from pyspark.find_spark_home import _find_spark_home
from pyspark.sql import SparkSession

from cdf_platform.core.config import MASTER_ENV, REMOTE_ENV, RUN_WORKER_ENV
from cdf_platform.orchestration.launch import run_worker
from cdf_platform.services.service import Service, free_port, port_open
from cdf_platform.spark.runtime.object_stores import ObjectStoreConf
from cdf_platform.spark.runtime.session import CONNECT_SERVER_CLASS, java_executable
from cdf_platform.spark.runtime.session_conf import delta_conf
from cdf_platform_testkit.jvm_options import SHORT_LIVED

START_TIMEOUT_SECONDS = 240.0


def spark_home() -> Path:
    """The Spark installation pyspark ships (its `bin/` and `jars/`)."""
    return Path(_find_spark_home())


class _Servers:
    """Processes (`Service`s, their logs `<name>.log` in `workdir`), stopped (group and all)
    at exit."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.services: list[Service] = []

    def _start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> Service:
        self.workdir.mkdir(parents=True, exist_ok=True)
        service = Service(name, command, self.workdir / f"{name}.log")
        service.start(
            {"SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})}
        )
        self.services.append(service)
        return service

    def _wait(self, what: str, ready: Callable[[], bool]) -> None:
        """Wait until `ready()`; raise RuntimeError if any of the processes exits first."""

        def all_alive_and_ready() -> bool:
            for service in self.services:
                if not service.alive():
                    code = service.process.returncode if service.process else None
                    raise RuntimeError(f"{what} exited ({code}); see {self.workdir}")
            return ready()

        self.services[-1].wait_until(all_alive_and_ready, START_TIMEOUT_SECONDS, every=0.5)

    def stop(self) -> None:
        """Stop every server by its process group, the last started first."""
        for service in reversed(self.services):
            service.stop(30)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


class StandaloneCluster(_Servers):
    """A Spark standalone master and one worker (`cores`, `memory`) on loopback.

    Attributes:
        master_url: `spark://127.0.0.1:<port>`, what `CDF_SPARK_MASTER` takes.
        conf_dir: A `SPARK_CONF_DIR` for its drivers: Delta's snapshot and listing parallelism
            sized to the worker's cores, as one sizes a small cluster (the defaults, 50 and
            10,000 tasks, are for large ones).
    """

    def __init__(self, workdir: Path, cores: int = 2, memory: str = "2g") -> None:
        super().__init__(workdir)
        self.port, self.ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.cores, self.memory = cores, memory
        self.conf_dir = workdir / "conf"

    def spark_defaults(self) -> str:
        """The `spark-defaults.conf` lines of `conf_dir`."""
        return (
            f"spark.databricks.delta.snapshotPartitions {self.cores}\n"
            f"spark.sql.sources.parallelPartitionDiscovery.parallelism {self.cores}\n"
            f"spark.executor.extraJavaOptions {SHORT_LIVED}\n"
        )

    def start(self) -> StandaloneCluster:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "spark-defaults.conf").write_text(self.spark_defaults(), encoding="utf-8")
        spark_class = str(spark_home() / "bin" / "spark-class")
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        self._start(
            "master",
            [spark_class, *master, "--port", str(self.port), "--webui-port", str(self.ui_port)],
            # No REST submission server: it would take the fixed port 6066.
            env={"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"},
        )
        self._wait("the Spark master", lambda: port_open(self.port))
        worker = ["org.apache.spark.deploy.worker.Worker", self.master_url, "--host", "127.0.0.1"]
        sizes = ["--cores", str(self.cores), "--memory", self.memory]
        ports = ["--webui-port", str(free_port()), "--work-dir", str(self.workdir / "work")]
        self._start("worker", [spark_class, *worker, *sizes, *ports])
        self._wait("the Spark worker", lambda: self.alive_workers() >= 1)
        return self

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver process on this cluster: its master, loopback (Spark
        otherwise binds to a routable address) and `conf_dir`."""
        return {
            MASTER_ENV: self.master_url,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_CONF_DIR": str(self.conf_dir),
        }

    def alive_workers(self) -> int:
        """Workers the master counts alive (its UI's JSON view); 0 while the view is not up
        yet: refused, or, on a loaded machine, an empty answer from a UI still starting."""
        try:
            return int(self.master_state().get("aliveworkers", 0))
        except (OSError, json.JSONDecodeError):
            return 0

    def master_state(self) -> dict[str, Any]:
        """The master's state as its web UI serves it at `/json/`: workers (each with its own
        `webuiaddress`), `activeapps` and `completedapps` (id, name, `cores` granted, state)."""
        return _get_json(f"http://127.0.0.1:{self.ui_port}/json/")

    def applications(self) -> dict[str, dict[str, Any]]:
        """Every application the master has run or runs, by id."""
        state = self.master_state()
        return {app["id"]: app for app in state["activeapps"] + state["completedapps"]}

    def executor_apps(self) -> list[str]:
        """The application id of every executor the workers run or ran (each worker's `/json/`
        lists its `executors` and `finishedexecutors`)."""
        apps = []
        for worker in self.master_state()["workers"]:
            state = _get_json(f"{worker['webuiaddress']}/json/")
            apps += [e["appid"] for e in state["executors"] + state["finishedexecutors"]]
        return apps

    def assert_one_application_since(self, before: set[str]) -> None:
        """The drivers started since the master's applications were `before` were one
        application, `cdf_platform`, granted the worker's cores, with its executor on the
        worker (the master's and the worker's `/json/`). A driver on a standalone master runs
        no task itself, so the executors did the work; a driver in local mode (the master
        setting ignored) leaves the master no application."""
        new = {app_id: app for app_id, app in self.applications().items() if app_id not in before}
        assert len(new) == 1, f"the master ran {len(new)} applications: {new}"
        ((app_id, app),) = new.items()
        assert (app["name"], app["cores"]) == ("cdf_platform", self.cores), app
        assert app_id in self.executor_apps(), f"no executor of {app_id} on the worker"


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        document: dict[str, Any] = json.load(response)
    return document


class ConnectServer(_Servers):
    """A Spark Connect server running `master`, with Delta configured (`delta_conf()`) unless
    `delta` is False, the connectors and settings of `stores`, and `conf` (a catalog, say).

    Attributes:
        url: `sc://127.0.0.1:<port>`, what `CDF_SPARK_REMOTE` takes.
    """

    def __init__(
        self,
        workdir: Path,
        master: str = "local[2]",
        delta: bool = True,
        stores: ObjectStoreConf | None = None,
        conf: dict[str, str] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.master = master
        self.delta = delta
        self.stores = stores or ObjectStoreConf()
        self.conf = conf or {}

    def client_env(self) -> dict[str, str]:
        """The environment of a process whose Spark is a client of this server."""
        return {REMOTE_ENV: self.url}

    def start(self) -> ConnectServer:
        stores = self.stores
        conf = {
            **(delta_conf(stores.packages, stores.excludes) if self.delta else {}),
            **stores.conf,
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            # Sized to a 2-core server, as one sizes a small one (defaults: 50 and 10,000).
            "spark.databricks.delta.snapshotPartitions": "2",
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
            "spark.sql.warehouse.dir": str(self.workdir / "warehouse"),
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={self.workdir}",
            **self.conf,
        }
        command = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS]
        command += ["--master", self.master, "--driver-memory", "2g"]
        for key, value in conf.items():
            command += ["--conf", f"{key}={value}"]
        self._start("connect", command)
        self._wait("the Spark Connect server", lambda: port_open(self.port))
        return self


# A Spark Connect client's first query: the server is up when it answers.
CONNECT_PROBE = (
    "import sys; from pyspark.sql import SparkSession; "
    "s = SparkSession.builder.remote(sys.argv[1]).getOrCreate(); "
    "assert s.sql('SELECT 1').collect()[0][0] == 1; s.stop()"
)


def connect_answers(url: str) -> bool:
    """Whether a Spark Connect server at `url` runs a query (in a client process of its own:
    a test process keeps no Connect channel open)."""
    probe = subprocess.run(
        [sys.executable, "-c", CONNECT_PROBE, url], capture_output=True, timeout=120, check=False
    )
    return probe.returncode == 0


class Engine(_Servers):
    """The platform's warm engine as a deployment runs it: `cdf-platform engine` (a Spark
    Connect server with Delta), configured by `env` (the lake, its pipelines file), serving
    `url` on a free loopback port; `kill` and `start` again restart it on the same port.

    Attributes:
        url: `sc://127.0.0.1:<port>`, what `CDF_SPARK_REMOTE` takes.
    """

    def __init__(
        self, workdir: Path, env: dict[str, str], master: str = "local[2]", memory: str = "1g"
    ) -> None:
        super().__init__(workdir)
        self.port = free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self.env = {**env, REMOTE_ENV: self.url}
        self.master, self.memory = master, memory

    def client_env(self) -> dict[str, str]:
        """The environment of a process whose Spark work runs on this engine."""
        return {REMOTE_ENV: self.url}

    def start(self) -> Engine:
        cli = str(Path(sys.executable).parent / "cdf-platform")
        command = [cli, "engine", "--master", self.master, "--driver-memory", self.memory]
        self._start("engine", command, self.env)
        self._wait("the engine", lambda: port_open(self.port) and connect_answers(self.url))
        return self

    def kill(self) -> None:
        """SIGKILL the engine's process group (a crash: sessions and operations gone)."""
        self.services.pop().kill()


class RunWorker(_Servers):
    """The platform's warm run worker as a deployment runs it: `cdf-platform run-worker`,
    configured by `env` (the instance's DAGSTER_HOME, the lake, the engine), on a free loopback
    port.

    Attributes:
        address: `127.0.0.1:<port>`, what `CDF_RUN_WORKER` takes.
        pid: The worker's process (its run processes are its children).
    """

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        super().__init__(workdir)
        self.address = f"127.0.0.1:{free_port()}"
        self.env = {**env, RUN_WORKER_ENV: self.address}

    @property
    def pid(self) -> int:
        return self.services[-1].pid

    def start(self) -> RunWorker:
        cli = str(Path(sys.executable).parent / "cdf-platform")
        self._start("run_worker", [cli, "run-worker"], self.env)
        self._wait("the run worker", lambda: run_worker.answers(self.address))
        return self


class HiveMetastore(_Servers):
    """A Hive metastore service (Thrift) with an embedded Derby database and a warehouse folder
    under `workdir`: the shared catalog several Spark processes point at.

    It is Hive 2.3's `HiveMetaStore` from pyspark's own jars (the metastore client Spark uses
    is the same version). Hive 2.3 has no bind-host setting for it: it listens on every
    interface, at a port found free on loopback; clients use 127.0.0.1.

    A service whose schemas live on an object store needs that store's Hadoop connector:
    `jars` (the connector's jars, e.g. those a Spark session resolved, see `store_jars`) and
    `hadoop_conf` (its `fs.*` settings) are added to its class path and `hive-site.xml`.

    Attributes:
        uri: `thrift://127.0.0.1:<port>`, what `spark.hadoop.hive.metastore.uris` takes.
        warehouse: Where schemas without a location of their own keep their tables.
    """

    def __init__(
        self,
        workdir: Path,
        jars: tuple[str, ...] = (),
        hadoop_conf: dict[str, str] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.port = free_port()
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self.warehouse = workdir / "warehouse"
        self.jars, self.hadoop_conf = jars, hadoop_conf or {}

    def start(self) -> HiveMetastore:
        conf_dir = self.workdir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        database = self.workdir / "metastore_db"
        settings = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={database};create=true",
            # An empty Derby database gets Hive's schema on first use, unchecked.
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": str(self.warehouse),
            # Hive's asynchronous logging needs the LMAX disruptor, which pyspark does not ship.
            "hive.async.log.enabled": "false",
            # The file systems of schema and table locations (the service creates their folders).
            **self.hadoop_conf,
        }
        properties = "".join(
            f"<property><name>{key}</name><value>{escape(value)}</value></property>\n"
            for key, value in settings.items()
        )
        (conf_dir / "hive-site.xml").write_text(
            f"<configuration>\n{properties}</configuration>\n", encoding="utf-8"
        )
        java = java_executable()
        classpath = os.pathsep.join([str(conf_dir), str(spark_home() / "jars" / "*"), *self.jars])
        command = [
            str(java),
            "-Xmx512m",
            *SHORT_LIVED.split(),
            f"-Dderby.system.home={self.workdir}",
        ]
        command += ["-cp", classpath]
        command += ["org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(self.port)]
        self._start("metastore", command)
        self._wait("the Hive metastore", lambda: port_open(self.port))
        return self

    def spark_conf(self) -> dict[str, str]:
        """The Spark conf that makes a Spark process use this metastore as its session catalog
        (a Spark Connect server takes it as `--conf`)."""
        return {
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": self.uri,
            "spark.sql.warehouse.dir": str(self.warehouse),
        }

    def spark_defaults(self) -> str:
        """`spark_conf` as `spark-defaults.conf` lines."""
        return "".join(f"{key} {value}\n" for key, value in self.spark_conf().items())


# The S3A connector's jars among those `spark.jars.packages` resolved (Ivy names them
# `<group>_<artifact>-<version>.jar`): hadoop-aws and the AWS SDK with its dependencies.
_S3A_JARS = ("org.apache.hadoop_hadoop-aws-", "software.amazon.", "org.reactivestreams_")


def s3a_jars(spark: SparkSession) -> tuple[str, ...]:
    """The local copies of the S3A connector's jars a (classic) session resolved from Maven
    Central: what a Hive metastore service needs to create folders on S3."""
    listed = spark.sparkContext.getConf().get("spark.jars", "") or ""
    paths = [urllib.parse.urlparse(jar).path or jar for jar in listed.split(",") if jar]
    return tuple(path for path in paths if Path(path).name.startswith(_S3A_JARS))
