"""cdf_platform deployed as a team runs Dagster, on loopback: the repository's
`deploy/dagster.yaml` on a PostgreSQL server, the warm engine (`cdf-platform engine`, a Spark
Connect server every silver run sends its Spark work to), the code server (`dagster code-server
start`, reloadable), the daemon and the webserver as `deploy/workspace.yaml` wires them, each in
its own process group, started, waited for and stopped by PID (their commands built as the
demo's are, by `cdf_platform.services.deployment_processes`); a bronze writer committing
`orders` batches; a watch of the run queue and of the deployment's memory. The system tests
and the freshness and fleet benchmarks (`bench/`) drive it; `warm=False` leaves the engine out
(each run starts a driver JVM of its own, the embedded default)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import psutil
from dagster._grpc.client import DagsterGrpcClient

from cdf_platform.core.config import REMOTE_ENV, RUN_WORKER_ENV
from cdf_platform.orchestration.launch.run_worker import answers
from cdf_platform.orchestration.sensors.incremental_sensor import PENDING_STATUSES
from cdf_platform.orchestration.sensors.sensor_stop import stop_sensor
from cdf_platform.orchestration.shared.keys import silver_pipeline_ids
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.planning.status import PipelineStatus, pipeline_status
from cdf_platform.services import deployment_processes
from cdf_platform.services.service import Service, free_port, port_open
from cdf_platform.spark.runtime.engine import DEFAULT_ENGINE_MEMORY
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.lake import write_pipelines
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_testkit.postgres import PostgresServer
from cdf_platform_testkit.spark_servers import connect_answers

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEPLOY = PROJECT_ROOT / "deploy"
START_TIMEOUT_S = 180.0
QUEUED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED]


def covered(run: dg.DagsterRun) -> list[str]:
    """The pipelines whose silver `run` writes (its asset selection's silver assets)."""
    return silver_pipeline_ids(run.asset_selection or ())


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on UnauthorizedError { message }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""


class Phases:
    """Where a long story's seconds went: `done(name)` closes the phase that began at the last
    `done` (or at creation); `str()` is the table, printed by a story however it ends."""

    def __init__(self) -> None:
        self._mark = self._start = time.monotonic()
        self.spent: list[tuple[str, float]] = []

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.spent.append((name, now - self._mark))
        self._mark = now

    def __str__(self) -> str:
        lines = [f"{seconds:7.1f} s  {name}" for name, seconds in self.spent]
        lines.append(f"{time.monotonic() - self._start:7.1f} s  in all")
        return "\n".join(lines)


@dataclass
class QueueWatch:
    """What a thread sampling the instance saw: queued runs per pipeline, the queue's size,
    and the deployment's resident memory."""

    max_queued_per_pipeline: Counter[str] = field(default_factory=Counter)
    queue_peak: int = 0
    memory_peak_bytes: int = 0
    samples: int = 0
    errors: int = 0
    # The runs (id, sensor, parent) of each time two runs of one pipeline were queued at once.
    doubles: list[list[tuple[str, str, str]]] = field(default_factory=list)


class Deployment:
    """The deployment's processes and folders under `root`.

    Attributes:
        lake: The lake root (bronze/<id>, silver/<id>, _control).
        home: DAGSTER_HOME, holding a copy of `deploy/dagster.yaml`.
        env: What every process of the deployment gets (instance, lake, code server address).
    """

    def __init__(
        self,
        root: Path,
        postgres: PostgresServer,
        pipelines: list[dict[str, Any]],
        *,
        warm: bool = True,
        engine_memory: str = DEFAULT_ENGINE_MEMORY,
        code: Sequence[str] = ("-m", "cdf_platform.definitions"),
        env: Mapping[str, str | None] | None = None,
        sections: Mapping[str, Any] | None = None,
    ) -> None:
        self.root, self.postgres, self.pipelines = root, postgres, pipelines
        # The pipelines file's other sections (`alerts=...`), kept on every rewrite.
        self.sections = dict(sections or {})
        self.lake, self.home, logs = root / "lake", root / "dagster_home", root / "logs"
        self.home.mkdir(parents=True, exist_ok=True)
        shutil.copy(DEPLOY / "dagster.yaml", self.home / "dagster.yaml")
        self.pipelines_file = root / "pipelines.yaml"
        self.write_pipelines(pipelines)
        self.code_server_port = free_port()
        self.webserver_port = free_port()
        self.read_only_port = free_port()
        self.engine_port = free_port()
        self.worker_port = free_port()
        self.warm = warm
        self.env = {
            **postgres.dagster_env(),
            "DAGSTER_HOME": str(self.home),
            "CDF_LAKE_ROOT": str(self.lake),
            "CDF_PIPELINES_FILE": str(self.pipelines_file),
            "CDF_CODE_SERVER_HOST": "127.0.0.1",
            "CDF_CODE_SERVER_PORT": str(self.code_server_port),
            # This checkout's code, whichever cdf_platform the environment has installed.
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
            ),
            **({REMOTE_ENV: f"sc://127.0.0.1:{self.engine_port}"} if warm else {}),
            # Empty: every run is launched through the code server (the launcher's fallback).
            RUN_WORKER_ENV: f"127.0.0.1:{self.worker_port}" if warm else "",
            **(env or {}),
        }
        workspace = DEPLOY / "workspace.yaml"
        self.engine = deployment_processes.engine(logs, PROJECT_ROOT, engine_memory)
        self.run_worker = deployment_processes.run_worker(logs, PROJECT_ROOT)
        self.code_server = deployment_processes.code_server(
            logs, PROJECT_ROOT, port=self.code_server_port, location="cdf_platform", code=code
        )
        self.daemon = deployment_processes.daemon(logs, PROJECT_ROOT, workspace)
        self.webserver = deployment_processes.webserver(
            "webserver", logs, PROJECT_ROOT, workspace=workspace, port=self.webserver_port
        )
        # The UI for people who watch the dashboards (docs/production.md, Security).
        self.read_only_webserver = deployment_processes.webserver(
            "read-only webserver",
            logs,
            PROJECT_ROOT,
            workspace=workspace,
            port=self.read_only_port,
            flags=("--read-only",),
        )
        self._instance: dg.DagsterInstance | None = None

    @property
    def services(self) -> list[Service]:
        return [
            self.engine,
            self.run_worker,
            self.code_server,
            self.daemon,
            self.webserver,
            self.read_only_webserver,
        ]

    def write_pipelines(self, pipelines: list[dict[str, Any]]) -> None:
        """(Re)write the deployment's pipelines file: read by the code server when it loads
        (at its start, and on each reload)."""
        self.pipelines = pipelines
        write_pipelines(self.pipelines_file, pipelines, **self.sections)

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        """This process's environment set as the deployment's (the instance reads its
        PostgreSQL settings from it), restored on exit."""
        saved = dict(os.environ)
        for name, value in self.env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)

    def instance(self) -> dg.DagsterInstance:
        """The deployment's instance, from `deploy/dagster.yaml` (inside `environment()`)."""
        if self._instance is None:
            self._instance = dg.DagsterInstance.from_config(str(self.home))
        return self._instance

    def set_sensor(self, name: str, *, running: bool) -> None:
        """Start or stop sensor `name` of the code location, as a user does on its page
        (inside `environment()`); a stop returns once it stays stopped and no tick of it is in
        flight (`cdf_platform.orchestration.sensors.sensor_stop.stop_sensor`)."""
        from dagster._core.workspace.context import WorkspaceProcessContext
        from dagster._core.workspace.load_target import WorkspaceFileTarget

        instance = self.instance()
        target = WorkspaceFileTarget(paths=[str(DEPLOY / "workspace.yaml")])
        with WorkspaceProcessContext(instance, target) as workspace:
            location = workspace.create_request_context().get_code_location("cdf_platform")
            sensor = location.get_repository("__repository__").get_sensor(name)
            if running:
                instance.start_sensor(sensor)
            else:
                stop_sensor(instance, sensor, 120)

    def start(self) -> None:
        """Start the engine (when warm), the code server, then the daemon and the webserver,
        and wait for each."""
        if self.warm:
            self.start_engine()
            self.start_run_worker()
        self.start_code_server()
        self.start_daemon()
        self.start_webserver()

    def start_webserver(self) -> None:
        """Start the webserver; wait until it answers."""
        self.webserver.start(self.env)
        self._wait(self.webserver, lambda: self._webserver_answers(self.webserver_port))

    def start_read_only_webserver(self) -> None:
        """Start the read-only webserver; wait until it answers."""
        self.read_only_webserver.start(self.env)
        self._wait(self.read_only_webserver, lambda: self._webserver_answers(self.read_only_port))

    def graphql(
        self, query: str, variables: dict[str, Any] | None = None, *, port: int | None = None
    ) -> dict[str, Any]:
        """The answer of a webserver's GraphQL API (the operator's UI unless `port`)."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{port or self.webserver_port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=180) as response:
            answer = json.load(response)
        assert isinstance(answer, dict), answer
        return answer

    def launch(
        self,
        job: str,
        run_config: Mapping[str, Any],
        *,
        assets: Sequence[Sequence[str]] = (),
        port: int | None = None,
    ) -> dict[str, Any]:
        """`launchPipelineExecution` of `job` (with `run_config`, on the asset keys `assets`)
        through a webserver's GraphQL API (the operator's unless `port`): its answer."""
        selector: dict[str, Any] = {
            "repositoryLocationName": "cdf_platform",
            "repositoryName": "__repository__",
            "jobName": job,
        }
        if assets:
            selector["assetSelection"] = [{"path": list(key)} for key in assets]
        variables = {"params": {"selector": selector, "runConfigData": dict(run_config)}}
        answer = self.graphql(LAUNCH, variables, port=port)
        launched = answer["data"]["launchPipelineExecution"]
        assert isinstance(launched, dict), answer
        return launched

    def start_engine(self) -> None:
        """Start the engine; wait until a Spark Connect client runs a query on it."""
        self.engine.start(self.env)
        self._wait(self.engine, self._engine_answers)

    def start_run_worker(self) -> None:
        """Start the run worker; wait until it answers."""
        self.run_worker.start(self.env)
        self._wait(self.run_worker, lambda: answers(self.env[RUN_WORKER_ENV]))

    def _engine_answers(self) -> bool:
        url = f"sc://127.0.0.1:{self.engine_port}"
        return port_open(self.engine_port) and connect_answers(url)

    def reload_code(self) -> None:
        """The UI's Reload of the code location, through the webserver's GraphQL API: the code
        server loads the definitions (and the pipelines file) again, in a fresh process."""
        query = (
            'mutation { reloadRepositoryLocation(repositoryLocationName: "cdf_platform") '
            "{ __typename ... on WorkspaceLocationEntry { locationOrLoadError { __typename } } } }"
        )
        answer = self.graphql(query)
        entry = answer["data"]["reloadRepositoryLocation"]
        assert entry["__typename"] == "WorkspaceLocationEntry", answer
        assert entry["locationOrLoadError"]["__typename"] == "RepositoryLocation", answer

    def start_code_server(self) -> None:
        self.code_server.start(self.env)
        self._wait(self.code_server, self._code_server_answers)

    def _code_server_answers(self) -> bool:
        client = DagsterGrpcClient(port=self.code_server_port, host="127.0.0.1")
        try:
            client.ping("")
        except Exception:  # not listening yet: dagster raises its own gRPC errors
            return False
        return True

    def start_daemon(self) -> None:
        """Start the daemon; wait until its sensor daemon has beaten after this start."""
        started = time.time()
        self.daemon.start(self.env)
        self._wait(self.daemon, lambda: self._daemon_beating(started))

    def _daemon_beating(self, since: float) -> bool:
        """Whether the daemon's sensor daemon has beaten after `since` (a timestamp)."""
        sensor = self.instance().get_daemon_heartbeats().get("SENSOR")
        return sensor is not None and sensor.timestamp > since

    def _webserver_answers(self, port: int) -> bool:
        url = f"http://127.0.0.1:{port}/server_info"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def _wait(self, service: Service, ready: Any) -> None:
        service.wait_until(ready, START_TIMEOUT_S)

    def stop(self) -> None:
        """Stop every process by PID: the daemon first (no new run), then the webservers, the
        code server with the runs it started, and the engine."""
        for service in (
            self.daemon,
            self.webserver,
            self.read_only_webserver,
            self.code_server,
            self.run_worker,
            self.engine,
        ):
            service.stop()

    def processes(self) -> list[psutil.Process]:
        """Every live process of the deployment: the services and their descendants (runs and
        their JVMs)."""
        found: list[psutil.Process] = []
        for service in self.services:
            if not service.alive():
                continue
            with contextlib.suppress(psutil.NoSuchProcess):
                root = psutil.Process(service.pid)
                found += [root, *root.children(recursive=True)]
        return found

    def run_processes(self) -> list[psutil.Process]:
        """The run processes: the run worker's children (forks), and those the code server
        started (its server process's children that multiprocessing spawned)."""
        found = []
        if self.run_worker.alive():
            with contextlib.suppress(psutil.NoSuchProcess):
                found += psutil.Process(self.run_worker.pid).children()
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                command = " ".join(process.cmdline())
                if "spawn_main" in command and "resource_tracker" not in command:
                    found.append(process)
        return found

    def run_workers(self) -> list[tuple[psutil.Process, psutil.Process]]:
        """(run process, its driver JVM) for every run of the code server whose JVM is up: the
        run process is the code server's child the JVM descends from."""
        pairs = []
        for process in self.processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                if process.name() != "java":
                    continue
                worker = process
                while (
                    parent := worker.parent()
                ) is not None and parent.pid != self.code_server.pid:
                    worker = parent
                if parent is not None and worker is not process:
                    pairs.append((worker, process))
        return pairs

    @property
    def lake_layout(self) -> LakeLayout:
        """The deployment's lake and pipelines file, as the code server reads them."""
        return LakeLayout(lake_root=str(self.lake), pipelines_file=self.env["CDF_PIPELINES_FILE"])

    def statuses(self) -> dict[str, PipelineStatus]:
        """Every pipeline's status (JVM-free)."""
        bound = self.lake_layout.bound()
        control = bound.control()
        return {spec.id: pipeline_status(spec, control) for spec in bound.specs()}

    def runs_of(self, pipeline_id: str, after: float) -> list[dg.RunRecord]:
        """The records of the runs covering `pipeline_id` created after `after` (a timestamp),
        newest first (inside `environment()`)."""
        return [
            r
            for r in self.instance().get_run_records(dg.RunsFilter())
            if pipeline_id in covered(r.dagster_run) and r.create_timestamp.timestamp() > after
        ]

    def account(self, pipeline_id: str, since: float) -> str:
        """What the deployment did for `pipeline_id` since `since` (a timestamp), for a failed
        wait's message: its runs (status, times, tags), the incremental sensor's last ticks,
        and the daemon's and code server's logs' tails (inside `environment()`)."""
        runs = [
            f"{r.dagster_run.run_id[:8]} {r.dagster_run.status.value} "
            f"created {r.create_timestamp.timestamp() - since:+.0f} s "
            f"ended {(r.end_time or since) - since:+.0f} s {dict(r.dagster_run.tags)}"
            for r in self.runs_of(pipeline_id, since)
        ]
        query = """{ sensorOrError(sensorSelector: {repositoryLocationName: "cdf_platform",
            repositoryName: "__repository__", sensorName: "incremental_sensor"}) {
            ... on Sensor { sensorState { ticks(limit: 12) {
                status timestamp runIds skipReason error { message } } } } } }"""
        try:
            ticks = self.graphql(query)["data"]["sensorOrError"]["sensorState"]["ticks"]
        except Exception as error:  # the account must not hide the failure it explains
            ticks = [f"(ticks unreadable: {error!r})"]
        return "\n".join(
            [
                f"runs of {pipeline_id}:",
                *runs,
                "incremental sensor ticks (newest first; time from `since`):",
                *(
                    str({**t, "timestamp": round(t["timestamp"] - since)})
                    if isinstance(t, dict)
                    else str(t)
                    for t in ticks
                ),
                "daemon log:",
                self.daemon.tail(60),
                "code server log:",
                self.code_server.tail(30),
            ]
        )

    def applied(self, pipeline_ids: list[str] | None = None) -> bool:
        """Whether every pipeline of `pipeline_ids` (default: all) has applied its bronze's
        latest version."""
        found = self.statuses()
        return all(
            found[i].watermark is not None and found[i].watermark == found[i].latest_version
            for i in (pipeline_ids or found)
        )

    def caught_up(self, pipeline_ids: list[str]) -> bool:
        """Whether every pipeline of `pipeline_ids` has applied its bronze's latest version and
        has no run pending (inside `environment()`)."""
        pending = self.instance().get_run_records(dg.RunsFilter(statuses=PENDING_STATUSES))
        if any(set(covered(record.dagster_run)) & set(pipeline_ids) for record in pending):
            return False
        return self.applied(pipeline_ids)

    def watermark_breaks(self, pipeline_ids: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """The load-log rows (with their pipeline) of runs that did not start from the
        watermark the run before them left: a change applied twice, or skipped. Empty when
        every run of `pipeline_ids` continued its predecessor's work. A REPAIRED row that
        reaches no further than the row before it (a run's process died between its load-log
        write and its state write: the next run recorded the state again from silver's log)
        applied nothing and is left out."""
        control = ControlTable(self.lake_layout.bound().control().root)
        breaks = []
        for pipeline_id in pipeline_ids:
            log: list[dict[str, Any]] = []
            for row in sorted(
                (row for row in control.read_log(pipeline_id) if row["outcome"] != "FAILED"),
                key=lambda row: row["finished_at"],
            ):
                recorded = log and row["watermark_after"] == log[-1]["watermark_after"]
                if not (row["outcome"] == "REPAIRED" and recorded):
                    log.append(row)
            breaks += [
                (pipeline_id, row)
                for previous, row in itertools.pairwise(log)
                if row["watermark_before"] != previous["watermark_after"]
            ]
        return breaks

    def bronze(self, pipeline_id: str) -> Path:
        return self.lake / "bronze" / pipeline_id

    def silver(self, pipeline_id: str) -> Path:
        return self.lake / "silver" / pipeline_id

    def watch(
        self, stop: threading.Event, every: float = 0.5
    ) -> tuple[threading.Thread, QueueWatch]:
        """Start a thread sampling the queue and memory every `every` seconds until `stop`."""
        seen = QueueWatch()
        instance = self.instance()

        def sample() -> None:
            while not stop.is_set():
                try:
                    queued = instance.get_run_records(dg.RunsFilter(statuses=QUEUED))
                except Exception:  # PostgreSQL restarting: the next sample reads again
                    seen.errors += 1
                    time.sleep(every)
                    continue
                per_pipeline = Counter(
                    pipeline_id for record in queued for pipeline_id in covered(record.dagster_run)
                )
                for pipeline_id, count in per_pipeline.items():
                    seen.max_queued_per_pipeline[pipeline_id] = max(
                        seen.max_queued_per_pipeline[pipeline_id], count
                    )
                    if count > 1:
                        seen.doubles.append(
                            [
                                (
                                    record.dagster_run.run_id,
                                    record.dagster_run.tags.get("dagster/sensor_name", ""),
                                    record.dagster_run.parent_run_id or "",
                                )
                                for record in queued
                                if pipeline_id in covered(record.dagster_run)
                            ]
                        )
                seen.queue_peak = max(seen.queue_peak, len(queued))
                memory = 0
                for process in self.processes():
                    with contextlib.suppress(psutil.NoSuchProcess):
                        memory += process.memory_info().rss
                seen.memory_peak_bytes = max(seen.memory_peak_bytes, memory)
                seen.samples += 1
                time.sleep(every)

        thread = threading.Thread(target=sample, name="queue-watch", daemon=True)
        thread.start()
        return thread, seen


@dataclass(frozen=True)
class Commit:
    """One bronze commit the writer made."""

    pipeline_id: str
    version: int
    at: float  # epoch seconds, when the commit returned


class BronzeWriter:
    """A thread committing one `orders` batch every `interval` seconds to a bronze table drawn
    from `pipeline_ids` (seeded), until stopped; with `spread`, one commit in each interval at a
    random instant of it (seeded): the same rate, but commits that do not keep one phase
    against a sensor ticking at the same period (a writer every 5 s beside a tick every 5 s
    lands every commit at one point of the tick's cycle, and a freshness figure then measures
    that point)."""

    def __init__(
        self,
        deployment: Deployment,
        pipeline_ids: list[str],
        *,
        interval: float,
        batch_size: int = 50,
        seed: int = 11,
        spread: bool = False,
    ) -> None:
        self.deployment, self.pipeline_ids = deployment, list(pipeline_ids)
        self.interval, self.batch_size, self.spread = interval, batch_size, spread
        self.rng = random.Random(seed)
        self.commits: list[Commit] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name="bronze-writer", daemon=True)

    def commit(self, pipeline_id: str) -> Commit:
        """One batch to `bronze/<pipeline_id>` now."""
        batch = write_orders_batch(
            str(self.deployment.bronze(pipeline_id)), batch_size=self.batch_size
        )
        made = Commit(pipeline_id, batch.version, time.time())
        self.commits.append(made)
        return made

    def _write(self) -> None:
        start = time.monotonic()
        for period in itertools.count():
            offset = self.rng.uniform(0.0, self.interval) if self.spread else 0.0
            at = start + period * self.interval + offset
            if self._stop.wait(max(0.0, at - time.monotonic())):
                return
            self.commit(self.rng.choice(self.pipeline_ids))

    def start(self) -> BronzeWriter:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
