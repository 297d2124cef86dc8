"""The benchmark runs every scenario end to end at a tiny size (no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.harness import BenchConfig
from bench.report import write_results
from bench.run import run_benchmarks
from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV

TINY = BenchConfig(
    rows=2_000,
    scale_rows=4_000,
    large_rows=None,  # (e) reuses the 4,000-row table, as a --quick run does
    reps=1,
    backlog_commits=2,
    log_sizes=(20, 50),
    tuning=False,
    warmup=False,
    quick=True,
)


def test_benchmark_runs_every_scenario_and_writes_both_result_files(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The phases below are Spark's: these tiny change sets would otherwise need no Spark.
    monkeypatch.setenv(JVM_FREE_MERGE_MAX_ROWS_ENV, "0")
    document = run_benchmarks(spark, TINY, tmp_path / "work")
    json_path, md_path = write_results(tmp_path / "out", "results", document)

    scenarios = [figure.scenario[:3] for figure in document["figures"]]
    assert scenarios == ["(a)", "(a)", "(b)", "(c)", "(d)", "(e)", "(e)", "(f)", "(g)"]
    # (e): the clustered backlog is the figure, the uniform one is reported beside what each run
    # reads and writes of silver (from its commit).
    clustered, uniform = (f for f in document["figures"] if f.scenario.startswith("(e)"))
    assert "clustered" in clustered.scenario and clustered.target == "<= 1.5"
    assert "uniform" in uniform.scenario and uniform.met is None
    assert "MiB of silver's files in full" in uniform.detail
    assert "reads 0.00 MiB" not in uniform.detail
    assert document["noop"] | {"stderr_tail": ""} == {
        "returncode": 0,
        "mode": "noop",
        "spark_started": False,
        "java_seen": False,
        "stderr_tail": "",
    }
    # Every method produced the same silver: one fingerprint per workload (2,000 and 4,000 rows,
    # each with a uniform and with a clustered backlog).
    assert len(set(map(tuple, document["fingerprints"].values()))) == 4
    # Where an incremental run's wall time goes: each of the platform's steps, Delta's own
    # split of the MERGE, and the remainders, so the rows add up to the measured wall time.
    steps = {"plan", "spark_start", "read", "silver_check", "silver_state", "key_filter", "merge"}
    steps |= {"commit_counts", "control", "lag_after", "between steps"}
    phases = document["phases"]
    assert steps <= set(phases), sorted(phases)
    assert any(name.startswith("merge: Delta's execution") for name in phases), sorted(phases)
    assert all(value >= -1e-6 for name in steps for value in phases[name])  # float rounding
    written = json.loads(json_path.read_text())
    assert written["run"]["rows"] == 2_000 and written["machine"]["cores"]
    assert "| scenario | measured [95% interval] | target | met? | detail |" in md_path.read_text()
