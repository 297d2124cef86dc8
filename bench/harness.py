"""The benchmark's configuration and harness: one session, fresh state per repetition, samples.

Every timed operation starts from its own copy of the pristine silver (a new folder each time:
delta-spark caches table state by path), and only the operation itself is timed; copying, the
result check and clean-up are not.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bench.baselines import handwritten_merge, streaming_merge
from bench.workload import (
    ROWS_PER_FILE,
    Backlog,
    Workload,
    build_workload,
    fingerprint,
    last_commit_metrics,
)
from cdf_platform.planning.run_result import RunResult
from cdf_platform.run import PipelineRunner
from cdf_platform_testkit.spark_conf import SessionsWithConf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger("bench")

# Delta's MERGE metrics that split the platform's `merge` step (milliseconds in the log).
MERGE_SPLIT = {
    "executionTimeMs": "merge: Delta's execution (executionTimeMs)",
    "scanTimeMs": "merge: of which finding the touched files (scanTimeMs)",
    "rewriteTimeMs": "merge: of which writing (rewriteTimeMs)",
    "materializeSourceTimeMs": "merge: of which copying the source (materializeSourceTimeMs)",
}

MASTER = "local[2]"
# Sized for 2 cores: Delta's state reconstruction defaults to 50 partitions
# (spark.databricks.delta.snapshotPartitions) and file listing to 10,000 tasks.
SESSION_CONF = {
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    # Silver's first load writes files of at most this many rows, each one key range.
    "spark.sql.files.maxRecordsPerFile": str(ROWS_PER_FILE),
}


@dataclass(frozen=True)
class BenchConfig:
    """What one benchmark run measures.

    Attributes:
        rows: Bronze rows (scenarios b-d, f, g).
        scale_rows: Bronze rows of scenario (a), with a uniform and a clustered backlog.
        large_rows: Bronze rows of the scaling scenario (e), same changed keys as `rows`
            (None: `scale_rows`).
        reps: Repetitions of each method in (a)-(c) and (e), interleaved in rounds (the median
            is reported, each ratio with a paired bootstrap interval over the rounds).
        tuning_reps: Repetitions of each tuning variant (in the first rounds).
        backlog_commits: Commits the backlog is spread over.
        changed_share: Share of `rows` keys the backlog changes.
        log_sizes: Commit counts of the replay-window scenario (d).
        tuning: Also measure the session-setting and deletion-vector variants.
        warmup: Run one unmeasured round before the measured ones.
        quick: A smoke run (labelled so in the results).
        shuffle_partitions: `spark.sql.shuffle.partitions` of the session.
        driver_memory: `spark.driver.memory`.
    """

    rows: int = 1_000_000
    scale_rows: int = 4_000_000
    large_rows: int | None = 16_000_000
    reps: int = 7
    tuning_reps: int = 3
    backlog_commits: int = 10
    changed_share: float = 0.01
    log_sizes: tuple[int, ...] = (100, 1_000, 5_000)
    tuning: bool = True
    warmup: bool = True
    quick: bool = False
    shuffle_partitions: int = 2
    driver_memory: str = "8g"

    @property
    def changed_keys(self) -> int:
        """Distinct keys the backlog changes (the same at both scales)."""
        return max(3, round(self.rows * self.changed_share))

    @property
    def scaling_rows(self) -> int:
        """Bronze rows of scenario (e)."""
        return self.large_rows or self.scale_rows

    def backlog(self, *, clustered: bool = False) -> Backlog:
        """The backlog applied at every scale (uniform, or clustered in key ranges)."""
        return Backlog.for_changed_keys(self.changed_keys, self.backlog_commits, clustered)


QUICK = BenchConfig(
    rows=100_000, scale_rows=400_000, large_rows=None, reps=1, tuning_reps=1, quick=True
)


class Bench:
    """One benchmark run: the workloads, the samples and the figures."""

    def __init__(self, spark: SparkSession, config: BenchConfig, workdir: Path) -> None:
        self.spark = spark
        self.config = config
        self.workdir = workdir
        self.samples: dict[str, list[float]] = {}
        self.phases: dict[str, list[float]] = {}
        self.fingerprints: dict[str, tuple[int, int]] = {}
        self.merge_metrics: dict[str, dict[str, str]] = {}
        self.notes: list[str] = []
        self.loads: list[float] = [os.getloadavg()[0]]
        self._runs = 0
        self.workload_rows: list[dict[str, Any]] = []
        self._built: dict[tuple[int, bool], Workload] = {}
        # A folder whose silver and control tables are caught up with bronze (for the no-op).
        self.caught_up: Path | None = None
        # Baselines run in a session of their own, as the platform does (newSession()).
        self.baseline_session = spark.newSession()

    def build(self, rows: int, *, clustered: bool = False) -> Workload:
        """Bronze with `rows` keys and the configured backlog, and its pristine silver (built
        once: a scenario asking for a size another one built gets the same tables)."""
        if (rows, clustered) in self._built:
            return self._built[rows, clustered]
        backlog = self.config.backlog(clustered=clustered)
        workload = build_workload(
            self.spark,
            self.workdir / f"rows_{rows}{'_clustered' if clustered else ''}",
            rows=rows,
            backlog=backlog,
            clock=time.perf_counter,
            # Each size is built with both backlogs: the second copies bronze and silver.
            base=self.workdir / f"base_{rows}",
        )
        self.workload_rows.append(
            {
                "bronze rows": f"{rows:,}",
                "backlog": f"{backlog.updates:,} updates, {backlog.inserts:,} inserts, "
                f"{backlog.deletes:,} deletes, {'clustered' if clustered else 'uniform'}",
                "versions": f"{workload.start_version}..{workload.end_version}",
                "build s": f"{workload.build_seconds:.1f}",
            }
        )
        logger.info("built %s in %.1f s", self.workload_rows[-1], workload.build_seconds)
        self._built[rows, clustered] = workload
        return workload

    def new_folder(self, name: str) -> Path:
        """A folder path never used before in this run (numbered, named after `name`)."""
        self._runs += 1
        return self.workdir / "runs" / f"{self._runs:03d}-{name}"

    def record(self, name: str, seconds: float) -> None:
        """Add a sample to `name` (and note the load average)."""
        self.samples.setdefault(name, []).append(seconds)
        self.loads.append(os.getloadavg()[0])
        logger.info("%-40s %8.2f s   (load %.1f)", name, seconds, self.loads[-1])

    def _check(self, name: str, workload: Workload, table: str) -> None:
        found = fingerprint(self.spark, table)
        reference = self.fingerprints.setdefault(workload.name, found)
        self.fingerprints[f"{workload.name}/{name}"] = found
        if found != reference or found[0] != workload.expected_rows:
            raise AssertionError(
                f"{name} produced silver {found}, expected {reference} with "
                f"{workload.expected_rows} rows: the methods do not do the same work"
            )

    def platform_run(
        self,
        workload: Workload,
        *,
        rebuild: bool = False,
        conf: Mapping[str, str] | None = None,
        prepare: Callable[[str], None] | None = None,
        name: str | None = None,
        keep: bool = False,
    ) -> tuple[float, RunResult, Path]:
        """Time one platform run (incremental, or rebuild) on a fresh copy of pristine silver."""
        label = name or ("rebuild" if rebuild else "incremental")
        folder = self.new_folder(label)
        spec, control = workload.copy_state(folder)
        if prepare is not None:
            prepare(spec.target)
        target = SessionsWithConf(self.spark, conf) if conf is not None else self.spark
        factory = cast("Callable[[], SparkSession]", lambda: target)
        started = time.perf_counter()
        result = PipelineRunner.on(control, factory).run(spec, force_rebuild=rebuild)
        seconds = time.perf_counter() - started
        assert result.watermark_after == workload.end_version, result
        if not rebuild and name is None and workload.name == str(self.config.rows):
            self._record_phases(seconds, result, spec.target)
        self._finish(label, workload, folder, spec.target, keep)
        return seconds, result, folder

    def _record_phases(self, seconds: float, result: RunResult, target: str) -> None:
        """Every second of one incremental run's wall time, attributed to its steps (the
        platform's timings; `write` is the sum of its steps, so it is left out), with the
        MERGE's own split from Delta's operation metrics."""
        steps = {k: v for k, v in result.timings.items() if k != "write"}
        # `duration_seconds` starts after planning: the rest of it is time between steps.
        steps["between steps"] = result.duration_seconds - sum(
            v for k, v in steps.items() if k != "plan"
        )
        steps["outside the run (call, result)"] = seconds - result.duration_seconds - steps["plan"]
        steps["wall (timed by the bench)"] = seconds
        metrics = last_commit_metrics(target)
        for key, label in MERGE_SPLIT.items():
            if key in metrics:
                steps[label] = int(metrics[key]) / 1000
        for phase, value in steps.items():
            self.phases.setdefault(phase, []).append(value)

    def baseline_run(self, workload: Workload, method: str) -> float:
        """Time the hand-written batch MERGE or the streaming MERGE on a fresh silver copy."""
        folder = self.new_folder(method)
        spec, _ = workload.copy_state(folder)
        session = self.baseline_session
        started = time.perf_counter()
        if method == "handwritten":
            handwritten_merge(
                session, workload.bronze, spec.target, workload.start_version, workload.end_version
            )
        else:
            checkpoint = str(folder / "checkpoint")
            batches = streaming_merge(
                session, workload.bronze, spec.target, workload.start_version, checkpoint
            )
            if batches != 1:
                self.notes.append(f"streaming ran {batches} micro-batches (expected 1)")
        seconds = time.perf_counter() - started
        self._finish(method, workload, folder, spec.target, keep=False)
        return seconds

    def _finish(self, name: str, workload: Workload, folder: Path, target: str, keep: bool) -> None:
        if f"{workload.name}/{name}" not in self.fingerprints:
            self._check(name, workload, target)
            self.merge_metrics[f"{workload.name}/{name}"] = last_commit_metrics(target)
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)

    def run_method(
        self, workload: Workload, method: str, sample: str, *, keep: bool = False
    ) -> None:
        """One timed repetition of `method`, recorded under `sample` (`keep`: keep the folder of
        a platform run, as `caught_up`)."""
        if method in ("incremental", "rebuild"):
            seconds, _, folder = self.platform_run(workload, rebuild=method == "rebuild", keep=keep)
            if keep:
                self.caught_up = folder
        else:
            seconds = self.baseline_run(workload, method)
        self.record(sample, seconds)
