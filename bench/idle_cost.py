"""What a caught-up fleet costs while nothing commits: CPU seconds per minute, by process.

The deployment of the fleet freshness benchmark (`bench.fleet_freshness`: deploy/dagster.yaml
on PostgreSQL, the warm engine, the run worker, the code server, the daemon, the webservers;
the fleet of `bench.fleet_lake`, 70% SCD1, 20% SCD2, 10% change-event logs), every silver loaded
by the sensors, then no run pending for `--settle` seconds; then `--minutes` with no commit,
placed between two ticks of checks_schedule (`bench.idle_window`),
each process's CPU time read from /proc before and after (`bench.process_meter`), split by
process. The fleet mode of `bench.freshness` measures the same idle window after its 10
minutes of commits and its streaming peer; this command measures the window alone, in a few
minutes, beside the peer's idle figure of the latest fleet report
(`bench/results/freshness_fleet.json`). Writes `bench/results/idle_cost.{json,md}`.

Usage:
    python -m bench.idle_cost [--pipelines 100] [--minutes 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyspark

from bench.fleet_freshness import IDLE_PER_MINUTE, SIDE_BY_SIDE, deployment_meter
from bench.fleet_lake import FleetLake, fleet_ids, fleet_pipeline
from bench.idle_window import wait_for_idle_window
from bench.process_meter import cpu_between, cpu_by_kind
from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    publish,
    run_info,
    scratch_folder,
)
from cdf_platform.orchestration.sensors.incremental_sensor import PENDING_STATUSES
from cdf_platform.services.service import wait_for
from cdf_platform_testkit.deployment import Deployment
from cdf_platform_testkit.postgres import PostgresServer

RESULTS = Path(__file__).resolve().parent / "results"
LOAD_TIMEOUT_S = 1800.0


def peer_idle_per_minute(path: Path) -> float | None:
    """The streaming peer's idle CPU seconds per minute in the fleet report `path`, from its
    side-by-side table (None: no report, or no such row in it)."""
    if not path.exists():
        return None
    rows = json.loads(path.read_text()).get("tables", {}).get(SIDE_BY_SIDE, [])
    for row in rows:
        if row.get("figure") == IDLE_PER_MINUTE:
            return float(row["peer"])
    return None


def measure(pipelines: int, minutes: float, settle: float, workdir: Path) -> dict[str, Any]:
    """The idle window of a caught-up fleet of `pipelines`: CPU seconds in all and by kind of
    process, the window's seconds, the seconds the fleet took to load."""
    fleet = fleet_ids(pipelines)
    with PostgresServer() as postgres:
        entries = [fleet_pipeline(i, kind) for i, kind in fleet.items()]
        deployment = Deployment(workdir, postgres, entries, warm=True)
        lake = FleetLake(deployment.lake, fleet)
        for pipeline_id in fleet:
            lake.write(pipeline_id)

        meter = deployment_meter(deployment, postgres)
        with deployment.environment():
            instance = deployment.instance()
            pending = dg.RunsFilter(statuses=PENDING_STATUSES)
            try:
                started = time.monotonic()
                deployment.start()
                wait_for("every silver loaded", deployment.applied, LOAD_TIMEOUT_S)
                loaded_s = time.monotonic() - started
                wait_for(
                    "no run pending", lambda: not instance.get_run_records(pending), LOAD_TIMEOUT_S
                )
                time.sleep(settle)
                wait_for_idle_window(minutes)
                meter.start()
                window_from = datetime.datetime.now(datetime.UTC)
                before, window_started = meter.mark(), time.monotonic()
                time.sleep(minutes * 60)
                after, window_s = meter.mark(), time.monotonic() - window_started
                window_runs = len(
                    instance.get_run_records(dg.RunsFilter(created_after=window_from))
                )
            finally:
                meter.stop()
                deployment.stop()
            instance.dispose()
    return {
        "cpu_s": cpu_between(before, after),
        "by_kind": cpu_by_kind(before, after, meter.kinds()),
        "window_s": window_s,
        "loaded_s": loaded_s,
        "window_runs": window_runs,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", type=int, default=100, help="the fleet's size")
    parser.add_argument("--minutes", type=float, default=2.0, help="the idle window")
    parser.add_argument(
        "--settle", type=float, default=30.0, help="seconds with no run pending before it"
    )
    parser.add_argument(
        "--peer-report",
        type=Path,
        default=RESULTS / "freshness_fleet.json",
        help="the fleet report whose streaming peer's idle cost is the target",
    )
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    loads = [round(os.getloadavg()[0], 2)]
    with scratch_folder(args, "cdf-idle-") as workdir:
        found = measure(args.pipelines, args.minutes, args.settle, workdir)
    loads.append(round(os.getloadavg()[0], 2))
    per_minute = 60 * found["cpu_s"] / found["window_s"]
    peer = peer_idle_per_minute(args.peer_report)
    window = f"{found['window_s']:.0f} s"
    document = {
        "run": run_info(
            "Idle cost of a caught-up fleet",
            "idle_cost",
            command_line("bench.idle_cost", argv),
            [
                f"{args.pipelines} pipelines (bench.fleet_lake's mix), every silver loaded by "
                f"the sensors in {found['loaded_s']:.0f} s, then {args.settle:g} s with no run "
                f"pending; idle window {window} with no commit",
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": [
            Figure(
                scenario="idle CPU seconds per minute, the whole deployment",
                measured=f"{per_minute:.2f}",
                target="below the streaming peer's"
                + (f" ({peer:.2f}, {args.peer_report.name})" if peer else ""),
                met=per_minute < peer if peer is not None else None,
                value=per_minute,
                detail=f"{found['cpu_s']:.1f} CPU s over {window}; "
                f"{found['window_runs']} run(s) created in the window",
            )
        ],
        "tables": {
            "Where the idle CPU went": [
                {
                    "process": kind,
                    "CPU seconds": f"{seconds:.1f}",
                    "per minute": f"{60 * seconds / found['window_s']:.2f}",
                }
                for kind, seconds in found["by_kind"].items()
            ]
        },
        "notes": [
            "A process's kind is its service (`<service>: children` for what it started: the "
            "code server's gRPC process evaluates the sensors, the run worker's children are "
            "runs). The peer's figure is the fleet report's idle window (`python -m "
            "bench.freshness --fleet`), measured after its own commits on this machine.",
        ],
    }
    publish(args.out, "idle_cost", document)


if __name__ == "__main__":
    main()
