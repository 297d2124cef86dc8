"""Runs launched as the Dagster UI and sensors launch them, and their timelines.

A code server (`dagster api grpc`, what `dagster dev` starts for each code location) serves
the platform's definitions with an environment of its own (`CDF_SPARK_MASTER` or
`CDF_SPARK_REMOTE`, the lake). A run is created on a real `DagsterInstance` from the code
server's snapshot of the job and its execution plan (as the sensor daemon creates one) and
launched through the instance's default run launcher: the code server starts a run process for
it (Python's `spawn`), which loads the definitions itself and executes the run. The timeline is
read back from the run's event log, and the processes below the code server are watched meanwhile
(`bench.probes.ProcessWatch`): when the run process started and exited, and any JVM below it.

Dagster's programmatic launch API is not public: this follows what its sensor daemon does
(`dagster._daemon.sensor`), through the same internal modules.

Example:
    >>> with CodeServer(workdir, env, instance) as server, Launcher(instance, server) as launch:
    ...     timeline = launch.run("incremental_job", dg.AssetKey(["silver", "bench"]))
    ... # doctest: +SKIP
    >>> timeline.marks["RUN_SUCCESS"] - timeline.launched_at  # doctest: +SKIP
    4.1
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import dagster as dg
from dagster._core.definitions.selector import JobSubsetSelector
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import GrpcServerTarget
from dagster._grpc.client import DagsterGrpcClient
from dagster._serdes import serialize_value

from bench.probes import ProcessWatch
from cdf_platform.orchestration.run_launcher import RUN_WORKER_TAG
from cdf_platform.services.service import LoopbackServer

LOCATION = "cdf_platform"
DEFINITIONS_MODULE = "cdf_platform.definitions"
PROJECT_ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT_SECONDS = 180.0
RUN_TIMEOUT_SECONDS = 600.0
# How long a run process may take to exit after RUN_SUCCESS (a local Spark stops its JVM).
EXIT_TIMEOUT_SECONDS = 120.0
# The engine event the run process writes once it has started (dagster._grpc.impl).
_STARTED_PROCESS = re.compile(r"Started process for run \(pid: (\d+)\)")
# Run events by the names the marks use (their values are the older PIPELINE_* names).
_RUN_EVENTS = {
    dg.DagsterEventType.RUN_STARTING: "RUN_STARTING",
    dg.DagsterEventType.RUN_START: "RUN_START",
    dg.DagsterEventType.RUN_SUCCESS: "RUN_SUCCESS",
    dg.DagsterEventType.RUN_FAILURE: "RUN_FAILURE",
}
_STEP_EVENTS = (
    dg.DagsterEventType.STEP_START,
    dg.DagsterEventType.STEP_SUCCESS,
    dg.DagsterEventType.ASSET_MATERIALIZATION,
)


class CodeServer(LoopbackServer):
    """`dagster api grpc` serving `cdf_platform.definitions` on a free loopback port, with the
    command line `dagster dev` gives its code servers, in the project folder, with `env` added
    to this process's environment (the run processes it starts inherit it).

    Attributes:
        port: The port it serves on.
        log: Its console output.
        start_seconds: How long its last start took (until it answered).
    """

    name = "code server"
    start_timeout = START_TIMEOUT_SECONDS
    stop_timeout = 30.0
    poll_seconds = 0.2

    def __init__(
        self, workdir: Path, env: Mapping[str, str], instance: dg.DagsterInstance, name: str
    ) -> None:
        self.log = workdir / f"code_server_{name}.log"
        super().__init__(self.log, cwd=PROJECT_ROOT)
        self.env = dict(env)
        self.instance_ref = serialize_value(instance.get_ref())
        self.start_seconds = 0.0
        self._client = DagsterGrpcClient(port=self.port, host="127.0.0.1")

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.service.pid

    def command(self) -> list[str]:
        command = [sys.executable, "-m", "dagster", "api", "grpc"]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--log-level", "WARNING"]
        command += ["--location-name", LOCATION, "--instance-ref", self.instance_ref]
        return [*command, "--module-name", DEFINITIONS_MODULE]

    def process_env(self) -> Mapping[str, str]:
        # This checkout's code, whichever cdf_platform the environment has installed.
        path = os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))
        return {**self.env, "PYTHONPATH": path}

    def ready(self) -> bool:
        try:
            self._client.ping("")
        except Exception:  # not listening yet: dagster raises its own gRPC errors
            return False
        return True

    def start(self) -> Self:
        """Start the server and wait until it answers (its definitions loaded)."""
        started = time.monotonic()
        super().start()
        self.start_seconds = time.monotonic() - started
        return self


@dataclass(frozen=True)
class RunTimeline:
    """One launched run: when each of its events happened (seconds since the epoch).

    Attributes:
        run_id: The Dagster run.
        status: Its final status (`SUCCESS`, ...).
        launched_at: When the launch began (before the run was created).
        marks: Event -> time: `created` (the run in the instance), `process started` (the
            run process, from /proc), `process ready` (its "Started process" engine event),
            RUN_STARTING, RUN_START, `STEP_START <step>`, `ASSET_MATERIALIZATION <step>`,
            `STEP_SUCCESS <step>` of each step, RUN_SUCCESS, `process exited` (found gone).
        materialization: The metadata values of each step's materialization, by step key.
        run_pid: The run process.
        java_below_run: `java` processes seen below the run process.
        java_below_server: `java` processes started below the code server during the run.
        java_options: The JVM options (`-X...`) of each `java` process below the run process.
    """

    run_id: str
    status: str
    launched_at: float
    marks: dict[str, float]
    materialization: dict[str, dict[str, Any]] = field(default_factory=dict)
    run_pid: int | None = None
    java_below_run: list[int] = field(default_factory=list)
    java_below_server: list[int] = field(default_factory=list)
    java_options: dict[int, list[str]] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        """Launch to RUN_SUCCESS: what the person who launched it waits."""
        return self.marks["RUN_SUCCESS"] - self.launched_at


class Launcher:
    """Creates and launches runs of the code server's jobs on `instance` (its default run
    launcher), one at a time, and returns their timelines."""

    def __init__(
        self, instance: dg.DagsterInstance, server: CodeServer, starter: int | None = None
    ) -> None:
        self.instance = instance
        self.server = server
        # The process whose children are the run processes: the code server, or the run
        # worker when the instance's launcher is `WarmRunLauncher`.
        self.starter = server.pid if starter is None else starter
        target = GrpcServerTarget(
            host="127.0.0.1", port=server.port, socket=None, location_name=LOCATION
        )
        self._context = WorkspaceProcessContext(instance, target)

    def run(
        self, job_name: str, asset: dg.AssetKey, tags: Mapping[str, str] | None = None
    ) -> RunTimeline:
        """Create a run of `job_name` for `asset` (and its checks, as a sensor's run request
        selects it), launch it, wait until it ends and its process exits; its timeline."""
        request = self._context.create_request_context()
        location = request.get_code_location(LOCATION)
        repository = next(iter(location.get_repositories().values()))
        instance = self.instance
        launched_at = time.time()
        selector = JobSubsetSelector(
            location_name=LOCATION,
            repository_name=repository.name,
            job_name=job_name,
            op_selection=None,
            asset_selection=[asset],
        )
        remote_job = location.get_job(selector)
        plan = location.get_execution_plan(
            remote_job, {}, step_keys_to_execute=None, known_state=None, instance=instance
        )
        created = instance.create_run(
            job_name=job_name,
            run_id=None,
            run_config={},
            status=dg.DagsterRunStatus.NOT_STARTED,
            tags=dict(tags or {}),
            root_run_id=None,
            parent_run_id=None,
            step_keys_to_execute=None,
            execution_plan_snapshot=plan.execution_plan_snapshot,
            job_snapshot=remote_job.job_snapshot,
            parent_job_snapshot=remote_job.parent_job_snapshot,
            asset_selection=frozenset([asset]),
            asset_check_selection=None,
            resolved_op_selection=remote_job.resolved_op_selection,
            op_selection=None,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
            asset_graph=repository.asset_graph,
        )
        marks = {"created": time.time()}
        with ProcessWatch(self.starter, interval=0.1) as watch:
            instance.launch_run(created.run_id, request)
            run = self._wait(created.run_id)
            pid, materialization = _read_events(instance, created.run_id, marks)
            forked = run.tags.get(RUN_WORKER_TAG)
            if pid is None and forked:
                # A fork of the warm run worker: ready (imports done) as it starts.
                pid = int(json.loads(forked)["pid"])
            # The next run starts only once this one's process (and a local JVM's parent) is
            # gone, so no process of this run is below the code server during the next.
            deadline = time.monotonic() + EXIT_TIMEOUT_SECONDS
            while pid is not None and watch.alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if pid is not None and not watch.alive(pid):
                marks["process exited"] = time.time()
        if pid is not None:
            started = watch.started.get(pid)
            if started is not None:
                marks["process started"] = started
                if forked:
                    marks["process ready"] = started
        below = watch.java_below(pid) if pid is not None else []
        return RunTimeline(
            run_id=created.run_id,
            status=run.status.value,
            launched_at=launched_at,
            marks=marks,
            materialization=materialization,
            run_pid=pid,
            java_below_run=below,
            # Launched from here on: a JVM of an earlier run that outlives it is not this run's.
            java_below_server=watch.java_below(since=launched_at),
            java_options={
                java: [a for a in watch.java_arguments.get(java, []) if a.startswith("-X")]
                for java in below
            },
        )

    def _wait(self, run_id: str) -> dg.DagsterRun:
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        while True:
            run = self.instance.get_run_by_id(run_id)
            assert run is not None, run_id
            if run.is_finished:
                return run
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not finish in {RUN_TIMEOUT_SECONDS:.0f} s")
            time.sleep(0.1)

    def close(self) -> None:
        """Release the workspace (the code server keeps running)."""
        self._context.__exit__(None, None, None)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_events(
    instance: dg.DagsterInstance, run_id: str, marks: dict[str, float]
) -> tuple[int | None, dict[str, dict[str, Any]]]:
    """Add the times of the run's events to `marks`; return the run process's id (from its
    "Started process" engine event) and the metadata of each step's materialization."""
    run_pid: int | None = None
    materialization: dict[str, dict[str, Any]] = {}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is None:
            continue
        kind = event.event_type
        if kind in _RUN_EVENTS:
            marks.setdefault(_RUN_EVENTS[kind], entry.timestamp)
        elif kind in _STEP_EVENTS:
            marks.setdefault(f"{kind.value} {entry.step_key}", entry.timestamp)
        elif kind is dg.DagsterEventType.ENGINE_EVENT:
            found = _STARTED_PROCESS.search(entry.message)
            if found is not None and run_pid is None:
                run_pid = int(found.group(1))
                marks["process ready"] = entry.timestamp
        if kind is dg.DagsterEventType.ASSET_MATERIALIZATION and entry.asset_materialization:
            metadata = entry.asset_materialization.metadata
            materialization[str(entry.step_key)] = {k: v.value for k, v in metadata.items()}
    return run_pid, materialization
