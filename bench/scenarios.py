"""The scenarios of issue 8, each a function of the harness: (a)-(c) the four methods on one
backlog, (d) replay-window checks on long logs, (e) scaling, (f) the no-op run, plus the
platform's fixed costs and the tuning variants (session settings, deletion vectors)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from bench.harness import Bench
from bench.probes import noop_via_cli, status_via_cli
from bench.replay_check import (
    clear_delta_cache,
    create_log_table,
    jvm_free_check,
    spark_history_check,
)
from bench.workload import DATA_COLUMNS, KEY, Workload, spec_for
from cdf_platform.core.spec.modes import DeleteMode
from cdf_platform.core.sql import sql_path
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.runtime.small_steps import AHEAD_CONF as SILVER_STATE_AHEAD
from cdf_platform.spark.runtime.small_steps import ENABLED_CONF as SMALL_STEPS_ENABLED
from cdf_platform.spark.runtime.small_steps import FIXED_PLAN_CONF
from cdf_platform.spark.table.silver_layout import SilverLayout
from cdf_platform.spark.table.silver_table import ensure_silver
from cdf_platform.spark.write.metrics import silver_commit_counts
from cdf_platform.state.control import ControlTable, LoadLogEntry
from cdf_platform_testkit.lake import write_pipelines
from cdf_platform_testkit.synthetic_log import write_synthetic_commits

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Incremental-run variants measured against each other (all on the same backlog).
TUNING_VARIANTS: dict[str, dict[str, str]] = {
    "shuffle 8, snapshotPartitions 2 (platform defaults on 2 local cores)": {
        "spark.sql.shuffle.partitions": "8",
        "spark.databricks.delta.snapshotPartitions": "2",
    },
    "shuffle 8, snapshotPartitions 50 (Delta's default)": {
        "spark.sql.shuffle.partitions": "8",
        "spark.databricks.delta.snapshotPartitions": "50",
    },
    "shuffle 2, snapshotPartitions 2 (the headline conf)": {
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
    },
    # The run as it was before its small steps ran interpreted
    # (`cdf_platform.spark.runtime.small_steps`).
    "small steps with generated code": {SMALL_STEPS_ENABLED: "false"},
    # Before a small change set ran on a fixed plan, and before silver's state was built while
    # the changes are read: each alone, then both (the run as it was before either).
    "adaptive execution kept": {FIXED_PLAN_CONF: "0"},
    "adaptive execution kept, silver's state after the read": {
        FIXED_PLAN_CONF: "0",
        SILVER_STATE_AHEAD: "false",
    },
}
WITHOUT_DELETION_VECTORS = "silver without deletion vectors"
WITHOUT_KEY_FILTER = "MERGE without the key filter"
SCATTERED = "silver not laid out by key"
# The backlogs of scenario (a): spread over every file, or in a few key ranges.
BACKLOG_KINDS = ("uniform", "clustered")
KEY_FILTER_OFF = {"spark.cdf_platform.merge.keyFilter": "false"}
# Sample-name suffix of scenario (e)'s runs per backlog kind.
SCALED_SUFFIX = {"uniform": "", "clustered": "_clustered"}
METHODS = ("incremental", "rebuild", "handwritten", "streaming")


def compare_methods(bench: Bench, workload: Workload) -> None:
    """Scenarios (a)-(c): the four methods, repetitions interleaved (order rotated per round),
    after one unmeasured warm-up round of the cheap ones."""
    if bench.config.warmup:
        for method in ("incremental", "handwritten", "streaming"):
            bench.run_method(workload, method, f"warmup/{method}")
    last = bench.config.reps - 1
    for rep in range(bench.config.reps):
        shift = rep % len(METHODS)
        for method in METHODS[shift:] + METHODS[:shift]:
            keep = rep == last and method == "incremental"
            bench.run_method(workload, method, method, keep=keep)


def disable_deletion_vectors(bench: Bench, target: str) -> None:
    """Turn deletion vectors off for silver at `target` (the platform creates silver with them:
    MERGE then marks replaced rows in a deletion vector; without them it copies every other
    row of the files it touches)."""
    bench.spark.sql(
        f"ALTER TABLE {sql_path(target)} "
        "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')"
    )


def tune(bench: Bench, workload: Workload) -> None:
    """Incremental runs under each session variant and with deletion vectors off on silver."""

    for _ in range(bench.config.tuning_reps):
        for label, conf in TUNING_VARIANTS.items():
            seconds, _, _ = bench.platform_run(workload, conf=conf, name=f"tuning/{label}")
            bench.record(f"tuning/{label}", seconds)
        seconds, _, _ = bench.platform_run(
            workload,
            prepare=partial(disable_deletion_vectors, bench),
            name=f"tuning/{WITHOUT_DELETION_VECTORS}",
        )
        bench.record(f"tuning/{WITHOUT_DELETION_VECTORS}", seconds)


def platform_overhead(bench: Bench, workload: Workload) -> None:
    """The fixed costs around the MERGE, each timed alone on a copy of pristine state: the
    control-table writes and silver's existence/owner/schema checks (all JVM-free, through
    `deltalake`), and the JVM-free search for the run's silver commit."""
    schema = bench.spark.read.format("delta").load(workload.bronze).schema
    layout = SilverLayout([KEY], list(DATA_COLUMNS), DeleteMode.HARD)
    for _ in range(bench.config.reps):
        folder = bench.new_folder("overhead")
        spec, control = workload.copy_state(folder)
        session = bench.spark.newSession()
        now = datetime.now(UTC)
        entry = LoadLogEntry("r", spec.id, "incremental", "SUCCESS", now, now)
        state = {"pipeline_id": spec.id, "last_commit_version": workload.start_version - 1}
        steps: list[tuple[str, Callable[[], object]]] = [
            ("control.ensure (both tables exist)", control.ensure),
            ("control.append_log (deltalake append)", partial(control.append_log, entry)),
            ("control.upsert_state (deltalake MERGE)", partial(control.upsert_state, state)),
            (
                "ensure_silver (owner and schema from the log)",
                partial(ensure_silver, session, spec.target, spec.id, schema, layout),
            ),
            (
                "silver_commit_counts (JVM-free history scan)",
                partial(
                    silver_commit_counts,
                    session,
                    spec.target,
                    spec.id,
                    "-",
                    DeleteMode.HARD,
                    storage=control.storage,
                ),
            ),
        ]
        for label, step in steps:
            started = time.perf_counter()
            step()
            bench.record(f"overhead/{label}", time.perf_counter() - started)
        # The control tables written by deltalake stay readable by delta-spark.
        session.read.format("delta").load(control.state_path).count()
        session.read.format("delta").load(control.log_path).count()
        shutil.rmtree(folder, ignore_errors=True)


def scatter_layout(bench: Bench, target: str) -> None:
    """Rewrite silver's rows into as many files, spread by a hash of the key (as a MERGE's
    shuffle writes them): every file then spans the whole key space. Its watermark stays."""
    frame = bench.spark.read.format("delta").load(target)
    files = len(frame.inputFiles())
    frame.repartition(files, KEY).write.format("delta").mode("overwrite").save(target)


def at_scale(bench: Bench) -> Workload:
    """Scenario (a): incremental run and snapshot rebuild on `scale_rows` rows, with a uniform and
    a clustered backlog (repetitions interleaved), and each without the key filter (tuning)."""
    config = bench.config
    workloads = {
        kind: bench.build(config.scale_rows, clustered=kind == "clustered")
        for kind in BACKLOG_KINDS
    }
    if config.warmup:
        for kind, workload in workloads.items():
            bench.run_method(workload, "incremental", f"warmup/incremental_{kind}")
    for rep in range(config.reps):
        for kind, workload in workloads.items():
            bench.run_method(workload, "incremental", f"incremental_{kind}")
            bench.run_method(workload, "rebuild", f"rebuild_{kind}")
            if config.tuning and rep < config.tuning_reps:
                name = f"tuning/{WITHOUT_KEY_FILTER}, {kind} backlog (a)"
                seconds, _, _ = bench.platform_run(workload, conf=KEY_FILTER_OFF, name=name)
                bench.record(name, seconds)
                name = f"tuning/{SCATTERED}, {kind} backlog (a)"
                prepare = partial(scatter_layout, bench)
                seconds, _, _ = bench.platform_run(workload, prepare=prepare, name=name)
                bench.record(name, seconds)
    return workloads["uniform"]


def scale(bench: Bench, base: Workload, scaled: Workload) -> Workload:
    """Scenario (e): a bronze `large_rows` table (or `scaled`'s size, when the run has none) with
    the same backlogs as the base size, uniform and clustered; paired runs at both sizes (the
    base size's run right before the large one's). The large table with the clustered backlog
    is the figure; the uniform one is reported beside the bytes each run must read and write."""
    config = bench.config
    pairs = {
        kind: (
            base if kind == "uniform" else bench.build(config.rows, clustered=True),
            bench.build(config.large_rows or scaled.rows, clustered=kind == "clustered"),
        )
        for kind in BACKLOG_KINDS
    }
    if config.warmup:
        for kind, (_, large) in pairs.items():
            bench.run_method(large, "incremental", f"warmup/incremental_scaled_{kind}")
    for rep in range(config.reps):
        for kind, (small, large) in pairs.items():
            suffix = SCALED_SUFFIX[kind]
            bench.run_method(small, "incremental", f"incremental_base_paired{suffix}")
            bench.run_method(large, "incremental", f"incremental_scaled{suffix}")
        if config.tuning and rep < config.tuning_reps:
            # The key filter only matters where it skips files: the clustered backlog.
            large = pairs["clustered"][1]
            name = f"tuning/{WITHOUT_KEY_FILTER}, {large.rows:,} rows, clustered backlog (e)"
            seconds, _, _ = bench.platform_run(large, conf=KEY_FILTER_OFF, name=name)
            bench.record(name, seconds)
            # Without deletion vectors a MERGE copies every other row of the files it touches:
            # measured up to `scale_rows` only (a run rewrites every file of silver).
            uniform = pairs["uniform"]
            for workload in (w for w in uniform if w.rows <= config.scale_rows):
                name = f"tuning/{WITHOUT_DELETION_VECTORS}, {workload.rows:,} rows (e)"
                seconds, _, _ = bench.platform_run(
                    workload, prepare=partial(disable_deletion_vectors, bench), name=name
                )
                bench.record(name, seconds)
    return pairs["uniform"][1]


def replay_windows(bench: Bench) -> None:
    """Scenario (d): both checks at each log size (the log is extended between sizes), and
    `cdf-platform status --json` on it in a subprocess that cannot start a JVM (the operator's
    whole path: interpreter start, imports, pipelines file, both logs, rendering)."""
    path = str(bench.workdir / "long_log")
    create_log_table(bench.spark, path)
    pipelines = bench.workdir / "long_log_pipelines.yaml"
    write_pipelines(pipelines, [spec_for(path, bench.workdir / "long_log_silver")])
    written = 1
    session = bench.baseline_session
    for size in bench.config.log_sizes:
        write_synthetic_commits(path, written + 1, size - 1)
        written = size - 1
        jvm_free_check(path)  # warm the OS page cache for both paths alike
        for _ in range(bench.config.reps):
            started = time.perf_counter()
            jvm_free_check(path)
            bench.record(f"replay/{size}/jvm_free", time.perf_counter() - started)
            clear_delta_cache(session)
            started = time.perf_counter()
            verdict = spark_history_check(session, path)
            bench.record(f"replay/{size}/spark_cold", time.perf_counter() - started)
            assert verdict.latest_version == size - 1 and verdict.contiguous, verdict
            started = time.perf_counter()
            spark_history_check(session, path)
            bench.record(f"replay/{size}/spark_warm", time.perf_counter() - started)
            bench.record(f"replay/{size}/status_cli", status_via_cli(pipelines, bench.workdir))


def noop(bench: Bench, workload: Workload) -> dict[str, Any]:
    """Scenario (f): a caught-up pipeline (the last incremental run of `compare_methods`) run
    through the CLI in a subprocess that cannot find Java (and is watched for a `java` child),
    and in process with a Spark factory that fails."""
    folder = bench.caught_up
    assert folder is not None, "compare_methods keeps its last incremental run's folder"
    spec = spec_for(workload.bronze, folder / "silver")
    control = folder / "_control"
    pipelines = folder / "pipelines.yaml"
    write_pipelines(pipelines, [spec])
    probes = [noop_via_cli(pipelines, folder, control)]  # warm-up (imports, page cache)
    for _ in range(bench.config.reps):
        probe = noop_via_cli(pipelines, folder, control)
        probes.append(probe)
        bench.record("noop_cli", probe.seconds)

    def no_spark() -> SparkSession:
        raise AssertionError("a no-op run asked for Spark")

    for _ in range(bench.config.reps):
        started = time.perf_counter()
        result = PipelineRunner.on(ControlTable(str(control)), no_spark).run(spec)
        bench.record("noop_in_process", time.perf_counter() - started)
        assert result.mode.value == "noop" and not result.spark_started, result
    last = probes[-1]
    return {
        "returncode": last.returncode,
        "mode": last.mode,
        "spark_started": last.spark_started,
        "java_seen": any(p.java_seen for p in probes),
        "stderr_tail": last.stderr_tail,
    }
