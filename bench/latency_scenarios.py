"""The latency benchmark's lake, its three scenarios, and where each run's time goes.

One bronze table (`rows` keys, CDF on) and its silver, loaded once by the benchmark's own Spark
session. Before each repetition of a silver run the benchmark writes a fresh backlog of
`changed_keys` keys on bronze (`bench.workload.write_backlog`, a new round of keys each time),
so every run applies alike changes to the same tables, as a pipeline does day after day. Only
the run is timed: from its launch (through `bench.launched_run`) to RUN_SUCCESS.

Scenarios:
- `local`: the run process starts its own Spark (`CDF_SPARK_MASTER`); a small backlog's run
  starts its driver JVM lean (`SHORT_RUN_JAVA_OPTIONS`: serial GC, C1 only), the platform's
  default (`SparkResource.lean_short_runs`);
- `local-default-jvm`: the same with the JVM's own defaults (G1, C2): driver options set in a
  `spark-defaults.conf` (`-XX:TieredStopAtLevel=4`), so the platform adds none;
- `noop`: silver is caught up, the run must find nothing to do and start no JVM;
- `connect`: the run process is a client of a Spark Connect server started beforehand
  (`CDF_SPARK_REMOTE`).
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg

from bench.harness import MERGE_SPLIT
from bench.launched_run import Launcher, RunTimeline
from bench.probes import wait_for_quiet
from bench.workload import (
    PIPELINE_ID,
    Backlog,
    last_commit_metrics,
    spec_for,
    write_backlog,
    write_bronze,
)
from cdf_platform.core.config import (
    CONTROL_ROOT_ENV,
    LAKE_ROOT_ENV,
    MASTER_ENV,
    PIPELINES_FILE_ENV,
    REMOTE_ENV,
)
from cdf_platform.orchestration.jobs.silver_jobs import INCREMENTAL_JOB
from cdf_platform.orchestration.shared.keys import PIPELINE_TAG, silver_key, silver_op_name
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.runtime.session_conf import SHORT_RUN_JAVA_OPTIONS
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.lake import write_pipelines

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger("bench.latency")

LOCAL, LOCAL_DEFAULT_JVM, NOOP, CONNECT = "local", "local-default-jvm", "noop", "connect"
# The deployment's shape: runs forked by the warm run worker, Spark on the warm engine.
WARM, WARM_NOOP = "warm", "warm-noop"
SCENARIOS = (LOCAL, LOCAL_DEFAULT_JVM, NOOP, CONNECT, WARM, WARM_NOOP)
# The no-op scenarios: a caught-up pipeline, no backlog, no JVM.
NOOPS = (NOOP, WARM_NOOP)
# The scenarios whose run process starts its own Spark.
LOCAL_SPARK = (LOCAL, LOCAL_DEFAULT_JVM)
# A launch waits until the machine's CPUs were busy at most this share of half a second.
QUIET_BUSY_SHARE = 0.10
# The JVM's default compilation (C1 then C2), as an explicit driver option.
FULL_JIT = "-XX:TieredStopAtLevel=4"
SILVER_STEP = silver_op_name(PIPELINE_ID)
# The instance the runs are launched on: a throwaway one, without first-use telemetry.
INSTANCE_YAML = "telemetry:\n  enabled: false\n"

# Where a run's time goes, in order: the phases add up to launch -> RUN_SUCCESS.
CREATE = "create the run (job subset and execution plan from the code server)"
LAUNCH = "launch, until the run process exists"
INTERPRETER = "run process: Python, dagster imports, instance"
DEFINITIONS = "run process: load the definitions (to RUN_START)"
TO_STEP = "RUN_START to the silver step's start (resources, plan)"
PLAN = "silver: plan from the logs (JVM-free)"
SPARK_START = "silver: Spark session start"
READ = "silver: read the change feed"
WRITE = "silver: write (MERGE)"
BOOKKEEPING = "silver: control tables, commit counts, lag after"
AROUND = "silver: Dagster around the platform's run (IO manager, events)"
AFTER = "after silver: checks and the run's end (to RUN_SUCCESS)"
PHASES = (
    CREATE,
    LAUNCH,
    INTERPRETER,
    DEFINITIONS,
    TO_STEP,
    PLAN,
    SPARK_START,
    READ,
    WRITE,
    BOOKKEEPING,
    AROUND,
    AFTER,
)
# Sums of phases, reported beside them.
BEFORE_SPARK = "before Spark: run process start to the session's request"
PLATFORM_RUN = "the platform's run (plan + RunResult duration)"
EXIT = "not waited for: RUN_SUCCESS to the run process's exit"


@dataclass(frozen=True)
class LatencyConfig:
    """What one latency benchmark measures.

    Attributes:
        rows: Bronze rows before the backlogs.
        changed_keys: Distinct keys each backlog changes (70% updates, 20% inserts, 10%
            deletes).
        backlog_commits: Commits each backlog is spread over.
        reps: Timed repetitions per scenario (median, min and max reported).
        warmup: Run one untimed-for-targets repetition first in each scenario (reported apart:
            a first run after a code server or Connect server starts).
        scenarios: Which of `local`, `local-default-jvm`, `noop`, `connect`, `warm` and
            `warm-noop` to run, in that order.
        master: `CDF_SPARK_MASTER` of the local runs, and the Connect server's master.
        quick: A smoke run (labelled so in the results).
    """

    rows: int = 100_000
    changed_keys: int = 1_000
    backlog_commits: int = 4
    reps: int = 5
    warmup: bool = True
    scenarios: tuple[str, ...] = SCENARIOS
    master: str = "local[2]"
    quick: bool = False

    def backlog(self) -> Backlog:
        """The backlog written before each silver run."""
        return Backlog.for_changed_keys(self.changed_keys, self.backlog_commits)


QUICK = LatencyConfig(rows=20_000, changed_keys=200, backlog_commits=2, reps=2, quick=True)


def breakdown(timeline: RunTimeline) -> dict[str, float]:
    """Where one run's time went (`PHASES`, then `BEFORE_SPARK`, `PLATFORM_RUN` and `EXIT`), in
    seconds; NaN for what the run did not report."""
    marks = timeline.marks
    nan = math.nan

    def span(first: str, last: str) -> float:
        return marks[last] - marks[first] if first in marks and last in marks else nan

    figures = timeline.materialization.get(SILVER_STEP, {})

    def figure(name: str) -> float:
        value = figures.get(name)
        return float(value) if isinstance(value, int | float) else 0.0

    plan, spark = figure("plan_seconds"), figure("spark_start_seconds")
    read, write = figure("read_seconds"), figure("write_seconds")
    duration = figure("duration_seconds")
    step = span(f"STEP_START {SILVER_STEP}", f"STEP_SUCCESS {SILVER_STEP}")
    found = {
        CREATE: marks["created"] - timeline.launched_at,
        LAUNCH: span("created", "process started"),
        INTERPRETER: span("process started", "process ready"),
        DEFINITIONS: span("process ready", "RUN_START"),
        TO_STEP: span("RUN_START", f"STEP_START {SILVER_STEP}"),
        PLAN: plan,
        SPARK_START: spark,
        READ: read,
        WRITE: write,
        BOOKKEEPING: duration - spark - read - write,
        AROUND: step - plan - duration,
        AFTER: span(f"STEP_SUCCESS {SILVER_STEP}", "RUN_SUCCESS"),
    }
    found[BEFORE_SPARK] = span("process started", f"STEP_START {SILVER_STEP}") + plan
    found[PLATFORM_RUN] = plan + duration
    found[EXIT] = span("RUN_SUCCESS", "process exited")
    return found


class LatencyBench:
    """The lake, the instance, and the runs measured so far.

    Attributes:
        samples: Launch -> RUN_SUCCESS seconds by scenario (`warmup/<scenario>` for the first
            run of each).
        phases: `breakdown` of every timed run, by scenario then phase.
        runs: One row per run (what it did, whether a JVM ran below it).
        setup: Seconds of the untimed setup steps.
    """

    def __init__(self, spark: SparkSession, config: LatencyConfig, workdir: Path) -> None:
        self.spark = spark
        self.config = config
        self.workdir = workdir
        self.lake = workdir / "lake"
        self.bronze = str(self.lake / "bronze" / PIPELINE_ID)
        self.spec = spec_for(self.bronze, self.lake / "silver" / PIPELINE_ID)
        self.pipelines = workdir / "pipelines.yaml"
        self.home = workdir / "dagster_home"
        self.samples: dict[str, list[float]] = {}
        self.phases: dict[str, dict[str, list[float]]] = {}
        self.runs: list[dict[str, Any]] = []
        self.setup: dict[str, list[float]] = {}
        self.loads: list[float] = [os.getloadavg()[0]]
        self._rounds = 0

    def build(self) -> dg.DagsterInstance:
        """Bronze, silver's first load (by this process's Spark), the pipelines file, and the
        instance (a `dagster.yaml` of its own under `workdir`)."""
        started = time.perf_counter()
        write_bronze(self.spark, self.bronze, self.config.rows)
        result = PipelineRunner.on(
            ControlTable(str(self.lake / "_control")), lambda: self.spark
        ).run(self.spec)
        assert result.watermark_after == 1, result
        write_pipelines(self.pipelines, [self.spec])
        self.note_setup("bronze and silver's first load", time.perf_counter() - started)
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "dagster.yaml").write_text(INSTANCE_YAML, encoding="utf-8")
        return dg.DagsterInstance.from_config(str(self.home))

    def note_setup(self, step: str, seconds: float) -> None:
        """Record an untimed setup step."""
        self.setup.setdefault(step, []).append(seconds)
        logger.info("setup: %s %.1f s", step, seconds)

    def environment(self, spark: Mapping[str, str]) -> dict[str, str]:
        """A code server's environment: the lake, the instance, and `spark` (the master or
        the Connect URL; the other one blanked, so the caller's own environment cannot leak
        in)."""
        return {
            LAKE_ROOT_ENV: str(self.lake),
            CONTROL_ROOT_ENV: str(self.lake / "_control"),
            PIPELINES_FILE_ENV: str(self.pipelines),
            "DAGSTER_HOME": str(self.home),
            MASTER_ENV: self.config.master,
            REMOTE_ENV: "",
            **spark,
        }

    def default_jvm_conf_dir(self) -> Path:
        """A Spark conf folder whose `spark-defaults.conf` sets driver JVM options (full tiered
        compilation, the JVM's default), so the platform leaves the JVM at its defaults (the
        `local-default-jvm` scenario's `SPARK_CONF_DIR`)."""
        folder = self.workdir / "default-jvm-spark-conf"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "spark-defaults.conf").write_text(
            f"spark.driver.extraJavaOptions {FULL_JIT}\n", encoding="utf-8"
        )
        return folder

    def new_backlog(self) -> None:
        """A fresh backlog on bronze (keys no earlier round changed)."""
        started = time.perf_counter()
        backlog = self.config.backlog()
        write_backlog(self.spark, self.bronze, self.config.rows, backlog, round_index=self._rounds)
        self._rounds += 1
        self.note_setup("backlog written on bronze", time.perf_counter() - started)

    def wait_for_quiet(self) -> None:
        """Before a launch: until the machine is quiet (the benchmark's own session keeps its
        cores busy for a while after writing a backlog, which no user's run shares)."""
        waited, share = wait_for_quiet(QUIET_BUSY_SHARE)
        self.note_setup("waiting for a quiet machine before a launch", waited)
        if share > QUIET_BUSY_SHARE:
            logger.warning("the machine stayed %.0f%% busy; launching anyway", 100 * share)

    def measure(self, launcher: Launcher, scenario: str) -> None:
        """The scenario's runs: a warm-up (when configured), then `reps` timed runs, each after
        a fresh backlog unless the scenario is the no-op."""
        reps = [(f"warmup/{scenario}", "warm-up")] if self.config.warmup else []
        reps += [(scenario, str(number + 1)) for number in range(self.config.reps)]
        for sample, label in reps:
            if scenario not in NOOPS:
                self.new_backlog()
            self.wait_for_quiet()
            timeline = launcher.run(
                INCREMENTAL_JOB, silver_key(PIPELINE_ID), tags={PIPELINE_TAG: PIPELINE_ID}
            )
            self._check(scenario, timeline)
            seconds = timeline.seconds
            self.samples.setdefault(sample, []).append(seconds)
            self.loads.append(os.getloadavg()[0])
            phases = breakdown(timeline)
            phases.update(self.merge_split(scenario))
            if sample == scenario:
                for phase, value in phases.items():
                    self.phases.setdefault(scenario, {}).setdefault(phase, []).append(value)
            self.runs.append(_run_row(scenario, label, timeline, phases))
            logger.info(
                "%-16s %6.2f s (spark start %.2f s, load %.1f)",
                sample,
                seconds,
                phases[SPARK_START],
                self.loads[-1],
            )

    def merge_split(self, scenario: str) -> dict[str, float]:
        """Delta's own timing of the run's MERGE (`MERGE_SPLIT`, seconds, from silver's latest
        commit, read JVM-free), wherever the MERGE ran (in the run process or in the Connect
        server); NaN for the no-op, which commits nothing."""
        if scenario in NOOPS:
            return dict.fromkeys(MERGE_SPLIT.values(), math.nan)
        metrics = last_commit_metrics(self.spec.target)
        if metrics.get("operation") != "MERGE":
            raise AssertionError(f"{scenario}: silver's latest commit is not the MERGE: {metrics}")
        return {
            label: int(metrics[key]) / 1000 if key in metrics else math.nan
            for key, label in MERGE_SPLIT.items()
        }

    def _check(self, scenario: str, timeline: RunTimeline) -> None:
        """The run did what the scenario says, or the benchmark stops."""
        figures = timeline.materialization.get(SILVER_STEP, {})
        problem = None
        backlog = self.config.backlog()
        if timeline.status != "SUCCESS":
            problem = f"the run ended {timeline.status}"
        elif scenario in NOOPS:
            if figures.get("mode") != "noop" or figures.get("spark_started") is not False:
                problem = f"not a no-op without Spark: {figures}"
            elif timeline.java_below_server:
                problem = f"a JVM ran below the run's launcher: {timeline.java_below_server}"
        elif figures.get("mode") != "incremental" or (
            figures.get("rows_inserted"),
            figures.get("rows_updated"),
            figures.get("rows_deleted"),
        ) != (backlog.inserts, backlog.updates, backlog.deletes):
            problem = f"not the backlog's incremental run ({backlog}): {figures}"
        elif scenario in LOCAL_SPARK and not timeline.java_below_run:
            problem = "no JVM seen below a run process that started local Spark"
        elif scenario == LOCAL and not any(
            set(SHORT_RUN_JAVA_OPTIONS.split()) <= set(options)
            for options in timeline.java_options.values()
        ):
            problem = f"no JVM below the run has {SHORT_RUN_JAVA_OPTIONS}: {timeline.java_options}"
        elif scenario == LOCAL_DEFAULT_JVM and not any(
            options and options[-1] == FULL_JIT for options in _tiered(timeline)
        ):
            problem = f"no JVM below the run ends with {FULL_JIT}: {timeline.java_options}"
        if problem is not None:
            raise AssertionError(f"{scenario} run {timeline.run_id}: {problem}")


def _tiered(timeline: RunTimeline) -> list[list[str]]:
    """The `-XX:TieredStopAtLevel` options of each JVM below the run, in command-line order
    (the last one is the one in force)."""
    return [
        [o for o in options if o.startswith("-XX:TieredStopAtLevel=")]
        for options in timeline.java_options.values()
    ]


def _run_row(
    scenario: str, label: str, timeline: RunTimeline, phases: Mapping[str, float]
) -> dict[str, Any]:
    figures = timeline.materialization.get(SILVER_STEP, {})
    return {
        "scenario": scenario,
        "run": label,
        "launch to RUN_SUCCESS s": f"{timeline.seconds:.2f}",
        "Spark start s": f"{phases[SPARK_START]:.2f}",
        "mode": figures.get("mode"),
        "rows +/~/-": f"{figures.get('rows_inserted')}/{figures.get('rows_updated')}/"
        f"{figures.get('rows_deleted')}",
        "spark_started": figures.get("spark_started"),
        "java below the run process": len(timeline.java_below_run),
        "run id": timeline.run_id[:8],
    }
