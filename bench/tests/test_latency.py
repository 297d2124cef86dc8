"""The latency benchmark launches real Dagster runs at a tiny size: a local-Spark silver run, the
same with the JVM at its defaults, and a no-op that starts no JVM (no timing is asserted;
Spark Connect is left to the benchmark)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.latency import run_latency
from bench.latency_scenarios import LOCAL, LOCAL_DEFAULT_JVM, NOOP, PHASES, LatencyConfig
from bench.report import write_results

TINY = LatencyConfig(
    rows=2_000,
    changed_keys=20,
    backlog_commits=1,
    reps=1,
    warmup=False,
    scenarios=(LOCAL, LOCAL_DEFAULT_JVM, NOOP),
    quick=True,
)


# A fresh Spark in a run process costs about a minute of the suite's CPU: run with `-m slow`.
@pytest.mark.slow
def test_latency_benchmark_times_a_local_run_and_a_noop_that_starts_no_jvm(
    spark: SparkSession, tmp_path: Path
) -> None:
    document = run_latency(spark, TINY, tmp_path / "work")
    json_path, md_path = write_results(tmp_path / "out", "latency", document)

    assert [figure.scenario.split()[0] for figure in document["figures"]] == ["(1)", "(1b)", "(3)"]
    runs = {row["scenario"]: row for row in document["runs"]}
    assert runs[NOOP]["mode"] == "noop" and runs[NOOP]["spark_started"] is False
    assert runs[NOOP]["java below the run process"] == 0
    assert "JVM started: no" in document["figures"][2].measured
    # The local run's own JVM was seen below its run process: the scan that saw none below the
    # no-op's does see JVMs.
    assert runs[LOCAL]["mode"] == "incremental" and runs[LOCAL]["rows +/~/-"] == "4/14/2"
    assert runs[LOCAL]["java below the run process"] >= 1
    # The default-JVM run's driver had the spark-defaults.conf options last (the benchmark
    # checks each run's command line).
    default_jvm = runs[LOCAL_DEFAULT_JVM]
    assert default_jvm["mode"] == "incremental" and default_jvm["rows +/~/-"] == "4/14/2"
    written = json.loads(json_path.read_text())
    assert set(written["phases"]) == {LOCAL, LOCAL_DEFAULT_JVM, NOOP}
    for scenario, samples in written["samples"].items():
        # The phases account for the whole wait, launch to RUN_SUCCESS.
        phases = written["phases"][scenario]
        assert math.isclose(sum(phases[p][0] for p in PHASES), samples[0], abs_tol=0.05)
    assert "| scenario | measured | target | met? | detail |" in md_path.read_text()
