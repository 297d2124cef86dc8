"""How often the deployment's daemon really ticks the incremental sensor, measured.

The deployment of the system tests (`cdf_platform_testkit.deployment`: deploy/dagster.yaml on
PostgreSQL, `dagster code-server start`, the daemon) with one pipeline whose bronze table is
not written (so no run starts and the ticks are the daemon's alone), for `--minutes`; then the
incremental sensor's ticks are read from the instance (`get_ticks`) and the seconds between
consecutive tick starts reported beside the sensor's `minimum_interval_seconds` and the
period of Dagster's sensor loop (`MIN_INTERVAL_LOOP_TIME`). Writes
`bench/results/tick_cadence.{json,md}`.

Usage:
    python -m bench.tick_cadence [--minutes 2]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pyspark
from dagster._core.scheduler.instigation import InstigatorType
from dagster._daemon.sensor import MIN_INTERVAL_LOOP_TIME

from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    publish,
    run_info,
    scratch_folder,
)
from cdf_platform.orchestration.sensors.incremental_sensor import INCREMENTAL_SENSOR, TICK_SECONDS
from cdf_platform_testkit.deployment import Deployment
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.postgres import PostgresServer

RESULTS = Path(__file__).resolve().parent / "results"
LONG_INTERVAL_S = 9.0
"""An interval at least this long skipped a loop iteration of the daemon (two periods)."""


def tick_starts(instance: dg.DagsterInstance, since: float) -> list[float]:
    """The start timestamps of the incremental sensor's ticks after `since`, oldest first."""
    states = [
        state
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
        if state.instigator_name == INCREMENTAL_SENSOR
    ]
    assert len(states) == 1, [s.instigator_name for s in states]
    state = states[0]
    ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, after=since)
    return sorted(tick.timestamp for tick in ticks)


def cadence(starts: list[float]) -> dict[str, Any]:
    """Count, mean, median, extremes and the long intervals between consecutive `starts`."""
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert len(gaps) >= 2, f"only {len(starts)} ticks"
    long = [g for g in gaps if g >= LONG_INTERVAL_S]
    return {
        "ticks": len(starts),
        "mean_s": round(statistics.fmean(gaps), 2),
        "median_s": round(statistics.median(gaps), 2),
        "min_s": round(min(gaps), 2),
        "max_s": round(max(gaps), 2),
        "long_share": round(len(long) / len(gaps), 2),
        "intervals_s": [round(g, 2) for g in gaps],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=2.0, help="how long to watch the ticks")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    loads = [round(os.getloadavg()[0], 2)]

    with scratch_folder(args, "cdf-ticks-") as workdir, PostgresServer() as postgres:
        deployment = Deployment(workdir, postgres, [orders_pipeline("t1")], warm=False)
        try:
            with deployment.environment():
                deployment.start_code_server()
                deployment.start_daemon()
                since = time.time()
                time.sleep(args.minutes * 60)
                loads.append(round(os.getloadavg()[0], 2))
                found = cadence(tick_starts(deployment.instance(), since))
        finally:
            deployment.stop()

    measured = f"mean {found['mean_s']} s, median {found['median_s']} s"
    document = {
        "run": run_info(
            "Incremental sensor tick cadence",
            "tick_cadence",
            command_line("bench.tick_cadence", argv),
            [
                f"minimum_interval_seconds {TICK_SECONDS}, "
                f"Dagster's sensor loop period {MIN_INTERVAL_LOOP_TIME} s",
                f"{found['ticks']} ticks in {args.minutes:g} min",
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": [
            Figure(
                scenario="seconds between incremental sensor ticks",
                measured=f"{measured}; {found['long_share']:.0%} at >= {LONG_INTERVAL_S:g} s",
                target=f"one tick per daemon loop ({MIN_INTERVAL_LOOP_TIME} s)",
                met=found["long_share"] == 0,
                value=found["mean_s"],
                detail=(f"{found['ticks']} ticks, intervals {found['min_s']}-{found['max_s']} s"),
            )
        ],
        "intervals_s": found["intervals_s"],
        "notes": [
            "Dagster's sensor daemon evaluates sensors in a loop of at least "
            f"{MIN_INTERVAL_LOOP_TIME} s (`dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME`, not "
            "configurable) and starts a tick only when `minimum_interval_seconds` have passed "
            "since the last tick's start (`is_under_min_interval`).",
        ],
    }
    publish(args.out, "tick_cadence", document)


if __name__ == "__main__":
    main()
