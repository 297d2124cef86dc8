"""The latency a Dagster user feels: from launching a silver run to the run's success.

Each run is launched as the Dagster UI and sensors launch one: created on a real
DagsterInstance from a code server's snapshot of `incremental_job` (for the silver asset and its
checks, as the incremental sensor requests it) and launched by the instance's default run
launcher, so it executes in a run process of its own that loads the definitions itself
(`bench.launched_run`). The scenarios (`bench.latency_scenarios`): a backlog of 1,000 changed
keys applied with local Spark started by the run process (with the platform's driver options,
and at the JVM's defaults), the same over the warm engine (`cdf-platform engine`, started
beforehand), the no-op of a caught-up pipeline, which must start no JVM, and the backlog and
the no-op in the deployment's shape: the run forked by the warm run worker (`cdf-platform
run-worker`, the instance's `WarmRunLauncher`) with its Spark work on the engine. Writes
`bench/results/latency.{json,md}` (`--quick`: `latency_quick.{json,md}`).

Usage:
    python -m bench.latency                 # 100k rows, 1,000 changed keys, 5 reps each
    python -m bench.latency --quick         # 20k rows, 200 changed keys, 2 reps each
    python -m bench.latency --scenarios local noop --reps 3
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from bench.harness import MERGE_SPLIT, BenchConfig
from bench.latency_scenarios import (
    AFTER,
    BEFORE_SPARK,
    CONNECT,
    EXIT,
    INSTANCE_YAML,
    LOCAL,
    LOCAL_DEFAULT_JVM,
    NOOP,
    PHASES,
    PLATFORM_RUN,
    QUICK,
    SCENARIOS,
    SPARK_START,
    WARM,
    WARM_NOOP,
    LatencyBench,
    LatencyConfig,
)
from bench.launched_run import CodeServer, Launcher
from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    median,
    publish,
    scratch_folder,
    summary_rows,
)
from bench.run import build_session
from cdf_platform.core.config import REMOTE_ENV
from cdf_platform_testkit.spark_servers import Engine, RunWorker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULTS_DIR = Path(__file__).parent / "results"
# Launch -> RUN_SUCCESS targets, seconds.
TARGETS = {
    LOCAL: 25.0,
    LOCAL_DEFAULT_JVM: 25.0,
    CONNECT: 5.0,
    NOOP: 1.0,
    WARM: 5.0,
    WARM_NOOP: 1.0,
}
TITLES = {
    LOCAL: "(1) silver run of {keys} changed keys, local Spark started by the run process",
    LOCAL_DEFAULT_JVM: "(1b) the same, the driver JVM at its defaults (G1, C2): driver options "
    "set in spark-defaults.conf, so the platform adds none",
    CONNECT: "(2) silver run of {keys} changed keys over the warm engine (`cdf-platform engine`, "
    "a Spark Connect server, already up)",
    NOOP: "(3) no-op silver run of a caught-up pipeline, no JVM",
    WARM: "(4) silver run of {keys} changed keys in the deployment's shape: the run forked by the "
    "warm run worker (`cdf-platform run-worker`), its Spark work on the warm engine",
    WARM_NOOP: "(5) no-op silver run of a caught-up pipeline, forked by the warm run worker",
}


def _finite_median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return median(finite) if finite else math.nan


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.2f}"


def figures(bench: LatencyBench) -> list[Figure]:
    """One figure per scenario run: the median launch -> RUN_SUCCESS against its target, and
    the largest phases behind it."""
    found = []
    for scenario in (s for s in SCENARIOS if s in bench.config.scenarios):
        samples = bench.samples[scenario]
        seconds, limit = median(samples), TARGETS[scenario]
        phases = {p: _finite_median(v) for p, v in bench.phases[scenario].items()}
        largest = sorted(PHASES, key=lambda p: -phases[p])[:3]
        detail = (
            f"before Spark {phases[BEFORE_SPARK]:.1f} s, Spark start {phases[SPARK_START]:.1f} s"
            f", platform run {phases[PLATFORM_RUN]:.1f} s, after {phases[AFTER]:.1f} s; "
            "largest: " + "; ".join(f"{p} {phases[p]:.1f} s" for p in largest)
        )
        met = seconds <= limit
        measured = f"{seconds:.2f} s (min {min(samples):.2f}, max {max(samples):.2f})"
        target = f"<= {limit:g} s"
        if scenario in (NOOP, WARM_NOOP):
            jvm = any(row["java below the run process"] for row in _runs(bench, scenario))
            measured += f", JVM started: {'YES' if jvm else 'no'}"
            target += ", no JVM"
            met = met and not jvm
        found.append(
            Figure(
                scenario=TITLES[scenario].format(keys=f"{bench.config.changed_keys:,}"),
                measured=measured,
                target=target,
                met=met,
                value=round(seconds, 3),
                detail=detail,
            )
        )
    return found


def _runs(bench: LatencyBench, scenario: str) -> list[dict[str, Any]]:
    return [row for row in bench.runs if row["scenario"] == scenario]


def _tables(bench: LatencyBench) -> dict[str, list[dict[str, Any]]]:
    ran = [s for s in SCENARIOS if s in bench.config.scenarios]
    phases = [*PHASES, BEFORE_SPARK, PLATFORM_RUN, *MERGE_SPLIT.values(), EXIT]
    return {
        "Launch to RUN_SUCCESS (seconds; warmup/: the first run of each scenario)": summary_rows(
            bench.samples
        ),
        "Where the time goes (median seconds of the timed runs)": [
            {
                "phase": phase,
                **{
                    f"{scenario} s": _seconds(_finite_median(bench.phases[scenario][phase]))
                    for scenario in ran
                },
            }
            for phase in phases
        ],
        "Every run": bench.runs,
        "Setup (not timed; median seconds)": [
            {"step": step, "median s": f"{median(values):.1f}", "times": len(values)}
            for step, values in bench.setup.items()
        ],
    }


def _served(
    bench: LatencyBench,
    instance: dg.DagsterInstance,
    env: dict[str, str],
    name: str,
    label: str,
    scenarios: list[str],
    starter: int | None = None,
) -> None:
    """Measure `scenarios` on runs launched through a code server of their own with `env`
    (its start noted as setup step `label`), their processes children of `starter` (the run
    worker's pid; default: the code server's)."""
    with CodeServer(bench.workdir, env, instance, name) as server:
        bench.note_setup(label, server.start_seconds)
        with Launcher(instance, server, starter) as launcher:
            for scenario in scenarios:
                bench.measure(launcher, scenario)


def _warm(bench: LatencyBench, engine_url: str) -> None:
    """The deployment's shape: an instance whose launcher hands runs to the warm run worker
    (deploy/dagster.yaml's `WarmRunLauncher`), Spark on the engine at `engine_url`."""
    home = bench.workdir / "dagster_home_warm"
    home.mkdir(parents=True, exist_ok=True)
    env = {**bench.environment({REMOTE_ENV: engine_url}), "DAGSTER_HOME": str(home)}
    with RunWorker(bench.workdir / "run_worker", env) as worker:
        begun = time.perf_counter()
        worker.start()
        bench.note_setup("run worker start", time.perf_counter() - begun)
        env = worker.env
        (home / "dagster.yaml").write_text(
            INSTANCE_YAML
            + "run_launcher:\n  module: cdf_platform.orchestration.run_launcher\n"
            + f"  class: WarmRunLauncher\n  config:\n    worker: {worker.address}\n",
            encoding="utf-8",
        )
        with dg.DagsterInstance.from_config(str(home)) as instance:
            scenarios = [s for s in (WARM, WARM_NOOP) if s in bench.config.scenarios]
            label = "code server start (warm run worker)"
            _served(bench, instance, env, WARM, label, scenarios, starter=worker.pid)


def run_latency(
    spark: SparkSession,
    config: LatencyConfig,
    workdir: Path,
    *,
    command: str = "python -m bench.latency",
) -> dict[str, Any]:
    """Every configured scenario; returns the results document (figures included).

    `spark` builds the lake and writes the backlogs; it does no work while a run is timed.
    """
    started = time.perf_counter()
    bench = LatencyBench(spark, config, workdir)
    with bench.build() as instance:
        launcher_class = type(instance.run_launcher).__name__
        local = [s for s in (LOCAL, NOOP) if s in config.scenarios]
        if local:
            env = bench.environment({})
            _served(bench, instance, env, LOCAL, "code server start (local Spark)", local)
        if LOCAL_DEFAULT_JVM in config.scenarios:
            env = bench.environment({"SPARK_CONF_DIR": str(bench.default_jvm_conf_dir())})
            label = "code server start (local Spark, JVM defaults)"
            _served(bench, instance, env, LOCAL_DEFAULT_JVM, label, [LOCAL_DEFAULT_JVM])
        if {CONNECT, WARM, WARM_NOOP} & set(config.scenarios):
            engine_env = bench.environment({})
            with Engine(
                workdir / "engine", engine_env, master=config.master, memory="4g"
            ) as engine:
                begun = time.perf_counter()
                engine.start()
                bench.note_setup("engine start", time.perf_counter() - begun)
                env = bench.environment({REMOTE_ENV: engine.url})
                if CONNECT in config.scenarios:
                    label = "code server start (Spark Connect)"
                    _served(bench, instance, env, CONNECT, label, [CONNECT])
                if {WARM, WARM_NOOP} & set(config.scenarios):
                    _warm(bench, engine.url)
    loads = [*bench.loads, os.getloadavg()[0]]
    backlog = config.backlog()
    return {
        "run": {
            "title": "cdf_platform latency benchmark",
            "label": "smoke run (--quick), not for targets" if config.quick else "full run",
            "quick": config.quick,
            "command": command,
            "summary": [
                f"Bronze: {config.rows:,} rows; before each silver run a fresh backlog of "
                f"{backlog.changed_keys:,} keys ({backlog.updates:,} updates, "
                f"{backlog.inserts:,} inserts, {backlog.deletes:,} deletes) in "
                f"{config.backlog_commits} commits; {config.reps} timed run(s) per scenario"
                f"{' after a warm-up run' if config.warmup else ''}, medians shown.",
                f"Runs: `incremental_job` for silver/bench and its checks, launched by the "
                f"instance's {launcher_class} through a `dagster api grpc` code server; local "
                f"Spark `{config.master}` (the platform's SparkResource defaults otherwise).",
            ],
            "rows": config.rows,
            "changed_keys": backlog.changed_keys,
            "backlog": vars(backlog),
            "backlog_commits": config.backlog_commits,
            "reps": config.reps,
            "scenarios": list(config.scenarios),
            "master": config.master,
            "run_launcher": launcher_class,
            "load_average": {"start": loads[0], "end": loads[-1], "max": max(loads)},
            "wall_seconds": round(time.perf_counter() - started, 1),
        },
        "machine": machine_info(spark.version),
        "figures": figures(bench),
        "tables": _tables(bench),
        "samples": bench.samples,
        "phases": bench.phases,
        "runs": bench.runs,
        "setup": bench.setup,
        "notes": NOTES,
    }


NOTES = [
    "Launch: the job subset and execution plan are asked of the code server, the run is "
    "created on the instance and `DagsterInstance.launch_run` hands it to the default run "
    "launcher, which asks the code server to start it; the code server starts a run process "
    "(multiprocessing `spawn`) that loads `cdf_platform.definitions` itself. The figure ends at "
    "the RUN_SUCCESS event (what the UI shows); the run process's exit after it is reported "
    "apart.",
    "The warm scenarios run on an instance of their own whose run launcher is "
    "`WarmRunLauncher` (deploy/dagster.yaml's): the run worker forks the run process, which has "
    "Dagster and the platform imported already, so its interpreter phase is 0 and its "
    "definitions phase runs from the fork to RUN_START; the engine is the one the connect "
    "scenario used, warmed by its runs.",
    "Not included: the wait in Dagster's run queue. `dagster dev` and deployments submit runs "
    "to the QueuedRunCoordinator, whose daemon dequeues them on its next loop; this benchmark "
    "calls `launch_run` directly, as that daemon does once it dequeues a run.",
    "Event times come from the event log (RUN_STARTING, the run process's 'Started process' "
    "engine event, RUN_START, STEP_START, STEP_SUCCESS, RUN_SUCCESS); the run process's start "
    "from /proc (10 ms resolution); the platform's plan, Spark start, read and write from the "
    "silver materialization's metadata (RunResult timings).",
    "JVMs: the processes below the code server are scanned every 0.1 s during each run. A local "
    "run's JVM is a child of its run process (each local run is checked to have one, which "
    "shows the scan sees JVMs); over Spark Connect the JVM is the server's, not below the run.",
    "Each silver run applies a fresh backlog of keys no earlier run changed, on the same "
    "tables; the backlog is written by the benchmark's own Spark session before the run is "
    "launched, and that session is idle while the run is timed. Every run is checked to have "
    "applied exactly the backlog's inserts, updates and deletes.",
    "Each launch waits until the machine is quiet: its CPUs busy at most 10% over half a second "
    "(at most 20 s; the setup table gives the waits). After writing a backlog the benchmark's "
    "own JVM keeps compiling and collecting for a while, on the 2 cores a run needs; a user's "
    "run shares its machine with no such writer.",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line of `python -m bench.latency`."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.latency", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 20k rows, 2 reps")
    parser.add_argument("--rows", type=int, help="bronze rows (default 100k; quick 20k)")
    parser.add_argument("--changed-keys", type=int, help="keys per backlog (1,000; quick 200)")
    parser.add_argument("--reps", type=int, help="timed runs per scenario (5; quick 2)")
    parser.add_argument("--no-warmup", action="store_true", help="no warm-up run")
    parser.add_argument(
        "--scenarios", nargs="+", choices=SCENARIOS, help="which scenarios (default: all)"
    )
    add_output_options(parser, RESULTS_DIR)
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> LatencyConfig:
    """The LatencyConfig the arguments ask for."""
    config = QUICK if args.quick else LatencyConfig()
    return replace(
        config,
        rows=args.rows or config.rows,
        changed_keys=args.changed_keys or config.changed_keys,
        reps=args.reps or config.reps,
        warmup=config.warmup and not args.no_warmup,
        scenarios=tuple(s for s in SCENARIOS if s in (args.scenarios or SCENARIOS)),
    )


def main(argv: list[str] | None = None) -> int:
    """Run the latency benchmark and write the results; return the exit code."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    args = parse_args(argv)
    config = config_from(args)
    with scratch_folder(args, "cdf_latency_") as workdir:
        # The benchmark's own session only builds the lake and writes backlogs.
        spark = build_session(BenchConfig(driver_memory="2g"), workdir)
        command = command_line("bench.latency", argv)
        document = run_latency(spark, config, workdir.resolve(), command=command)
    publish(args.out, "latency_quick" if config.quick else "latency", document)
    # Unmet targets are results, not failures: they are in the report.
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
