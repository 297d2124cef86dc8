"""The demo's deployment: the production shape of docs/production.md on embedded defaults.

`cdf-platform demo` runs its story on the processes a deployment runs, each started here in its
own process group on a free loopback port, waited for, and stopped by PID:

- the warm engine (`cdf-platform engine`: Spark Connect with Delta, on `local[2]`), where every
  run's Spark work goes;
- the run worker (`cdf-platform run-worker`), which forks each run;
- the code server (`dagster code-server start`) serving the demo's definitions under the
  location name `workspace.demo.yaml` gives them (so `make dev` later shows the same location
  and its runs);
- the daemon (`dagster-daemon run`): the run queue, sensors and schedules.

The instance is Dagster's SQLite one in `<workdir>/dagster_home`. The story launches each job
as the UI's Launchpad does (a run of the code location's job, submitted to the run queue), and
starts or stops sensors as a user does on their pages; the daemon evaluates them and launches
what they request. Every run, tick and check evaluation is therefore in the instance exactly as
in production, and `make dev` shows them on Overview, Jobs, Automation and the assets' pages.

When the story ends the instance's `dagster.yaml` drops the run worker (its process is gone):
`make dev` launches runs the embedded way, each with a local Spark driver.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.events import DagsterEventType
from dagster._core.remote_representation.external import RemoteSensor
from dagster._core.scheduler.instigation import InstigatorTick
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget

from cdf_platform.core.config import (
    ALLOW_DESTRUCTIVE_ENV,
    AUTOMATION_ENV,
    REMOTE_ENV,
    RUN_WORKER_ENV,
)
from cdf_platform.orchestration.launch.run_worker import answers
from cdf_platform.orchestration.sensors.sensor_stop import SensorNotStopped, stop_sensor
from cdf_platform.services import deployment_processes
from cdf_platform.services.service import free_port, port_open, wait_for

# Who launched a run the story submits: Dagster's `user` tag (dagster._core.storage.tags.
# USER_TAG), which the UI's runs list shows as "Launched by" instead of "Manually launched".
LAUNCHED_BY_TAG = "user"
LAUNCHED_BY = "cdf-platform demo"

# workspace.demo.yaml's code location: named after its module, as Dagster names it.
LOCATION = "cdf_platform.demo.demo_definitions"
REPOSITORY = "__repository__"
RUN_TIMEOUT_SECONDS = 300.0
ENDED = {
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.CANCELED,
}
# Laptop-sized engine: Delta replays its log with 50 tasks and VACUUM lists files with 10,000
# by default, most of the time spent on tables this small.
ENGINE_CONF = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
    "spark.default.parallelism": "4",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
}
INSTANCE_YAML = """\
# The demo's instance (`cdf-platform demo` writes it; the demo folder is wiped on each run).
# Runs wait in a queue the daemon drains every second; one run per pipeline at a time
# (docs/production.md, Configuration).
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
concurrency:
  pools:
    granularity: run
    default_limit: 1
telemetry:
  enabled: false
"""
# While the story runs, each run starts in the demo's run worker (a fork, on the warm engine).
WORKER_LAUNCHER_YAML = """\
run_launcher:
  module: cdf_platform.orchestration.run_launcher
  class: WarmRunLauncher
  config:
    worker: "{address}"
"""
WORKSPACE_YAML = """\
# The demo's code server (`cdf-platform demo` starts it and writes this file).
load_from:
  - grpc_server:
      host: 127.0.0.1
      port: {port}
      location_name: {location}
"""

# How often the demo asks whether what it waits for happened.
POLL_SECONDS = 0.25


class DeploymentFailed(RuntimeError):
    """A process of the demo's deployment did not start, or a run did not end in time."""


@dataclass(frozen=True)
class RunResult:
    """A run of the demo's deployment, once ended."""

    run: dg.DagsterRun
    instance: dg.DagsterInstance

    @property
    def run_id(self) -> str:
        return self.run.run_id

    @property
    def success(self) -> bool:
        return self.run.status == dg.DagsterRunStatus.SUCCESS

    def metadata(self, key: dg.AssetKey) -> dict[str, Any]:
        """The metadata values of the run's last materialization of `key` ({} if none)."""
        found: dict[str, Any] = {}
        for record in self.instance.all_logs(
            self.run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION
        ):
            event = record.dagster_event
            if event is None or event.asset_key != key:
                continue
            materialization = event.step_materialization_data.materialization
            found = {k: v.value for k, v in materialization.metadata.items()}
        return found

    def failures(self) -> list[tuple[Any, str]]:
        """Each failed step's `incident_code` metadata value (None if none) and message."""
        found = []
        for record in self.instance.all_logs(self.run_id, of_type=DagsterEventType.STEP_FAILURE):
            event = record.dagster_event
            if event is None:
                continue
            data = event.step_failure_data
            metadata = data.user_failure_data.metadata if data.user_failure_data else {}
            code = metadata.get("incident_code")
            found.append((getattr(code, "value", code), data.error.message if data.error else ""))
        return found


class DemoDeployment:
    """The demo's processes and instance under `workdir` (see the module docstring).

    Attributes:
        home: DAGSTER_HOME, the demo's SQLite instance.
        env: What every process of the deployment gets beyond this process's environment.
    """

    def __init__(self, workdir: Path, *, engine_memory: str = "2g") -> None:
        self.home = workdir / "dagster_home"
        logs = workdir / "logs"
        self.code_port, self.engine_port, self.worker_port = free_port(), free_port(), free_port()
        self.worker_address = f"127.0.0.1:{self.worker_port}"
        self.workspace_file = self.home / "workspace.yaml"
        self.env: dict[str, str | None] = {
            "DAGSTER_HOME": str(self.home),
            REMOTE_ENV: f"sc://127.0.0.1:{self.engine_port}",
            RUN_WORKER_ENV: self.worker_address,
            # The story is the operator: it starts each sensor when its part of the story comes.
            AUTOMATION_ENV: "off",
            ALLOW_DESTRUCTIVE_ENV: None,
        }
        cwd = Path.cwd()
        self.engine = deployment_processes.engine(
            logs, cwd, engine_memory, master="local[2]", conf=ENGINE_CONF
        )
        self.run_worker = deployment_processes.run_worker(logs, cwd, self.worker_address)
        self.code_server = deployment_processes.code_server(
            logs, cwd, port=self.code_port, location=LOCATION, code=("-m", LOCATION)
        )
        self.daemon = deployment_processes.daemon(logs, cwd, self.workspace_file)
        self._workspace: WorkspaceProcessContext | None = None
        self.instance: dg.DagsterInstance | None = None

    def write_instance(self, *, warm: bool) -> None:
        """The instance's dagster.yaml: with the run worker while the story runs (`warm`),
        without it after."""
        launcher = WORKER_LAUNCHER_YAML.format(address=self.worker_address) if warm else ""
        (self.home / "dagster.yaml").write_text(INSTANCE_YAML + launcher, encoding="utf-8")

    def start(self) -> dg.DagsterInstance:
        """Start every process (the engine's JVM starting while the others load) and wait for
        each; return the instance."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.write_instance(warm=True)
        self.workspace_file.write_text(
            WORKSPACE_YAML.format(port=self.code_port, location=LOCATION), encoding="utf-8"
        )
        for service in (self.engine, self.run_worker, self.code_server):
            service.start(self.env)
        self.run_worker.wait_until(lambda: answers(self.worker_address))
        self.code_server.wait_until(lambda: port_open(self.code_port))
        instance = dg.DagsterInstance.from_config(str(self.home))
        self.instance = instance
        started = time.time()
        self.daemon.start(self.env)

        def beating() -> bool:
            beat = instance.get_daemon_heartbeats().get("SENSOR")
            return beat is not None and beat.timestamp > started

        self.daemon.wait_until(beating)
        # The workspace says when the code server it watches restarted; the story says why.
        logging.getLogger("dagster-webserver").setLevel(logging.WARNING)
        self._workspace = WorkspaceProcessContext(
            instance, WorkspaceFileTarget(paths=[str(self.workspace_file)])
        )
        self.engine.wait_until(lambda: port_open(self.engine_port))
        return instance

    def stop(self) -> None:
        """Stop every process by PID (the daemon first: no new run), and leave the instance
        as `make dev` uses it."""
        if self._workspace is not None:
            self._workspace.__exit__(None, None, None)
            self._workspace = None
        for service in (self.daemon, self.code_server, self.run_worker, self.engine):
            service.stop()
        if self.instance is not None:
            self.instance.dispose()
        if self.home.exists():
            self.write_instance(warm=False)

    def restart_code(self, env: Mapping[str, str | None]) -> None:
        """Restart the code server and the run worker with `env` added to their environment
        (what a deployment does to change a setting the definitions read when they load),
        and reload the code location."""
        self.env.update(env)
        for service, ready in (
            (self.run_worker, lambda: answers(self.worker_address)),
            (self.code_server, lambda: port_open(self.code_port)),
        ):
            service.stop()
            service.start(self.env)
            service.wait_until(ready)
        self._context().reload_code_location(LOCATION)

    def _context(self) -> WorkspaceProcessContext:
        if self._workspace is None:
            raise DeploymentFailed("the demo's deployment is not started")
        return self._workspace

    def _instance(self) -> dg.DagsterInstance:
        if self.instance is None:
            raise DeploymentFailed("the demo's deployment is not started")
        return self.instance

    def submit(
        self,
        job_name: str,
        run_config: Mapping[str, Any] | None = None,
        *,
        assets: Sequence[dg.AssetKey] = (),
        tags: Mapping[str, str] | None = None,
    ) -> str:
        """Submit a run of the code location's `job_name` (on `assets` when given) to the run
        queue, as the UI's Launchpad does, launched by the demo's story (`LAUNCHED_BY_TAG`);
        return its run id."""
        instance = self._instance()
        context = self._context().create_request_context()
        location = context.get_code_location(LOCATION)
        remote_job = location.get_job(
            JobSubsetSelector(
                location_name=LOCATION,
                repository_name=REPOSITORY,
                job_name=job_name,
                op_selection=None,
                asset_selection=list(assets) or None,
            )
        )
        config = dict(run_config or {})
        plan = location.get_execution_plan(
            remote_job, config, step_keys_to_execute=None, known_state=None, instance=instance
        )
        run = instance.create_run(
            job_name=job_name,
            run_id=None,
            run_config=config,
            resolved_op_selection=remote_job.resolved_op_selection,
            step_keys_to_execute=None,
            status=None,
            op_selection=None,
            root_run_id=None,
            parent_run_id=None,
            tags={**remote_job.run_tags, LAUNCHED_BY_TAG: LAUNCHED_BY, **(tags or {})},
            job_snapshot=remote_job.job_snapshot,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_selection=frozenset(assets) if assets else None,
            asset_check_selection=None,
            asset_graph=location.get_repository(REPOSITORY).asset_graph,
        )
        instance.submit_run(run.run_id, context)
        return run.run_id

    def run(
        self,
        job_name: str,
        run_config: Mapping[str, Any] | None = None,
        *,
        assets: Sequence[dg.AssetKey] = (),
        tags: Mapping[str, str] | None = None,
    ) -> RunResult:
        """`submit`, then wait for the run to end."""
        return self.wait(self.submit(job_name, run_config, assets=assets, tags=tags))

    def wait(self, run_id: str) -> RunResult:
        """Wait until run `run_id` ends."""
        instance = self._instance()

        def ended() -> dg.DagsterRun | None:
            run = instance.get_run_by_id(run_id)
            return run if run is not None and run.status in ENDED else None

        found = wait_for(
            f"run {run_id}", ended, RUN_TIMEOUT_SECONDS, POLL_SECONDS, error=DeploymentFailed
        )
        return RunResult(found, instance)

    def wait_idle(self, timeout: float = RUN_TIMEOUT_SECONDS) -> None:
        """Wait until no run is queued, starting or in progress."""
        instance = self._instance()
        pending = [status for status in dg.DagsterRunStatus if status not in ENDED]

        def idle() -> bool:
            return not instance.get_runs(filters=dg.RunsFilter(statuses=pending), limit=1)

        wait_for("the run queue to drain", idle, timeout, POLL_SECONDS, error=DeploymentFailed)

    def failed_runs(self, since: float) -> list[str]:
        """The runs created since `since` (a timestamp) that failed, as `<job> <run id>`."""
        records = self._instance().get_run_records(
            dg.RunsFilter(
                statuses=[dg.DagsterRunStatus.FAILURE],
                created_after=datetime.fromtimestamp(since, tz=UTC),
            )
        )
        return [f"{record.dagster_run.job_name} {record.dagster_run.run_id}" for record in records]

    def _sensor(self, name: str) -> RemoteSensor:
        context = self._context().create_request_context()
        repository = context.get_code_location(LOCATION).get_repository(REPOSITORY)
        return repository.get_sensor(name)

    def start_sensor(self, name: str) -> float:
        """Start sensor `name` (the daemon evaluates it from its next loop); return when."""
        self._instance().start_sensor(self._sensor(name))
        return time.time()

    def stop_sensor(self, name: str) -> None:
        """Stop sensor `name`; return once it stays stopped and no tick of it is in flight
        (`cdf_platform.orchestration.sensors.sensor_stop.stop_sensor`)."""
        try:
            stop_sensor(self._instance(), self._sensor(name), RUN_TIMEOUT_SECONDS)
        except SensorNotStopped as error:
            raise DeploymentFailed(str(error)) from error

    def ticks(self, name: str, after: float) -> list[InstigatorTick]:
        """Sensor `name`'s ticks since `after` (a timestamp), oldest first."""
        sensor = self._sensor(name)
        ticks = self._instance().get_ticks(
            sensor.get_remote_origin_id(), sensor.selector_id, after=after
        )
        return sorted(ticks, key=lambda tick: tick.timestamp)
