"""`WarmRunLauncher`: Dagster's default run launcher, but a run starts in the deployment's warm
run worker (`cdf_platform.orchestration.launch.run_worker`, `cdf-platform run-worker`) by a fork of
a process that has Dagster and the platform imported, instead of the code server spawning a new
interpreter for it. Named in the instance's `dagster.yaml` (deploy/dagster.yaml):

```yaml
run_launcher:
  module: cdf_platform.orchestration.run_launcher
  class: WarmRunLauncher
  config:
    worker: {env: CDF_RUN_WORKER}    # host:port of the run worker; empty: none
```

The worker is an accelerator, never a single point of failure: when it does not answer, the run
is launched through the code server exactly as `DefaultRunLauncher` does (an engine event of
the run says so). A run the worker started is tagged with its process
(`.dagster/cdf_platform_run_worker`: address, pid, start time), which lets run monitoring see
at once a run process that died (its pid gone or reused: the run is marked failed within a
monitoring interval, instead of waiting for `max_runtime_seconds`) and lets a termination
reach it (SIGTERM, which Dagster turns into the run's interruption). The key starts with
`.dagster/`, which Dagster's GraphQL API leaves out of a run's tags (`TagType.HIDDEN`): the
UI's runs list shows what an operator reads (the queue, the incident a rebuild repairs), not a
process id. Runs tagged before the key moved carry `cdf_platform/run_worker`, still read.

This module is loaded by every process that opens the instance (daemon, webserver, code
server, runs): it imports nothing beyond Dagster, psutil (Dagster's) and the standard library.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any, Self

import dagster as dg
from dagster._config.config_schema import UserConfigSchema
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, WorkerStatus
from dagster._serdes import ConfigurableClassData

from cdf_platform.orchestration.launch.run_worker import is_same_process, request

# The run tag naming the run worker's process that runs it. Hidden from the UI: Dagster's
# GraphQL API drops tags under `.dagster/` (dagster._core.storage.tags.HIDDEN_TAG_PREFIX); not
# `.dagster/run_worker`, which is Dagster's own (RUN_WORKER_ID_TAG).
RUN_WORKER_TAG = ".dagster/cdf_platform_run_worker"
# Where runs launched before the key moved carry it (read, never written).
LEGACY_RUN_WORKER_TAG = "cdf_platform/run_worker"


class WarmRunLauncher(dg.DefaultRunLauncher):
    """Launches each run in the warm run worker at `worker` (`host:port`), else through the
    code server (`DefaultRunLauncher`).

    Example:
        >>> WarmRunLauncher(worker="127.0.0.1:4010").worker
        '127.0.0.1:4010'
    """

    def __init__(self, inst_data: ConfigurableClassData | None = None, worker: str = "") -> None:
        self.worker = worker.strip()
        super().__init__(inst_data=inst_data)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return {
            "worker": dg.Field(
                dg.StringSource,
                is_required=False,
                default_value="",
                description="host:port of the run worker (`cdf-platform run-worker`); empty: "
                "every run is launched through the code server.",
            )
        }

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]
    ) -> Self:
        return cls(inst_data=inst_data, worker=str(config_value.get("worker") or ""))

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if self.worker:
            try:
                reply = request(self.worker, {"op": "launch", "run_id": run.run_id})
            except (OSError, ValueError) as err:
                self._instance.report_engine_event(
                    f"the run worker at {self.worker} did not answer ({err}): launching the "
                    "run through the code server",
                    run,
                    cls=self.__class__,
                )
            else:
                if "pid" in reply:
                    process = {
                        "worker": self.worker,
                        **{key: reply.get(key) for key in ("pid", "started", "host")},
                    }
                    self._instance.add_run_tags(run.run_id, {RUN_WORKER_TAG: json.dumps(process)})
                    return
                self._instance.report_engine_event(
                    f"the run worker at {self.worker} refused the run ({reply.get('error')}): "
                    "launching it through the code server",
                    run,
                    cls=self.__class__,
                )
        stale = {tag: "" for tag in (RUN_WORKER_TAG, LEGACY_RUN_WORKER_TAG) if run.tags.get(tag)}
        if stale:
            # A retry carries its parent's tags: this run's process is not the parent's.
            self._instance.add_run_tags(run.run_id, stale)
        super().launch_run(context)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        process = _process(run) if run is not None else None
        if run is None or process is None:
            return super().terminate(run_id)
        if run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        try:
            reply = request(process["worker"], {"op": "terminate", **_identity(process)})
        except (OSError, ValueError) as err:
            self._instance.report_engine_event(
                f"cannot reach the run worker at {process['worker']} to stop the run: {err}",
                run,
                cls=self.__class__,
            )
            return False
        return bool(reply.get("signalled"))

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        process = _process(run)
        if process is None:
            # Started by the code server: nothing tells here whether its process lives (run
            # monitoring's max_runtime_seconds still ends a run that never finishes).
            return CheckRunHealthResult(WorkerStatus.RUNNING, "started by the code server")
        if process.get("host") == socket.gethostname():
            # On this machine (the deployment's usual shape): ask the process table itself, so
            # a run whose worker died with it is found while the worker is down.
            alive = is_same_process(int(process["pid"]), float(process["started"]))
        else:
            try:
                reply = request(process["worker"], {"op": "alive", **_identity(process)}, timeout=5)
            except (OSError, ValueError) as err:
                return CheckRunHealthResult(
                    WorkerStatus.RUNNING, f"the run worker did not answer ({err}): assumed running"
                )
            alive = bool(reply.get("alive"))
        if alive:
            return CheckRunHealthResult(WorkerStatus.RUNNING)
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"the run's process (pid {process['pid']}) is gone without ending the run",
        )


def _process(run: dg.DagsterRun) -> dict[str, Any] | None:
    """The run worker's process of `run` (its tag, or the tag's earlier key), if the worker
    started it."""
    tag = run.tags.get(RUN_WORKER_TAG) or run.tags.get(LEGACY_RUN_WORKER_TAG)
    return json.loads(tag) if tag else None


def _identity(process: Mapping[str, Any]) -> dict[str, Any]:
    return {"pid": process["pid"], "started": process["started"]}
