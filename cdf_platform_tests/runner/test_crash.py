"""A run killed between the silver MERGE and the control-table write, then rerun."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from cdf_platform.core.faults import FAULT_ENV, FAULT_EXIT_CODE, FaultPoint
from cdf_platform.planning.plan import RunMode
from cdf_platform.runner import run_pipeline
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.bronze import control_for, insert, make_bronze, rows, spec_for, sql


def _write_pipelines_file(path: Path, spec_fields: dict[str, str]) -> None:
    lines = ["pipelines:", "  - id: people", "    keys: [id]"]
    lines += [f"    {name}: {value}" for name, value in spec_fields.items()]
    path.write_text("\n".join(lines) + "\n")


def test_crash_after_merge_before_control_write_converges_on_rerun(
    spark: SparkSession, lake: Path, tmp_path: Path
) -> None:
    spec = spec_for(lake, delete_mode="hard")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    run_pipeline(spec, spark_factory=lambda: spark, control=control)
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    insert(spark, spec.source, [(4, "dee", 40)])

    pipelines = tmp_path / "pipelines.yaml"
    _write_pipelines_file(
        pipelines,
        {"source": spec.source, "target": spec.target, "fallback_mode": "FAIL_FAST"},
    )
    killed = subprocess.run(
        [
            sys.executable,
            "-m",
            "cdf_platform.cli",
            "run",
            "people",
            "--pipelines",
            str(pipelines),
            "--control-root",
            control.root,
        ],
        env={
            **os.environ,
            FAULT_ENV: FaultPoint.BEFORE_CONTROL.value,
            "CDF_SPARK_MASTER": "local[1]",
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr[-3000:]
    # The MERGE and its watermark landed together; the control table still says 1.
    assert read_silver_state(spec.target, spec.id).watermark == 4
    assert control.read_states()[spec.id]["last_commit_version"] == 1

    rerun = run_pipeline(spec, spark_factory=lambda: spark, control=control)
    assert rerun.mode is RunMode.NOOP
    assert rows(spark, spec.target) == rows(spark, spec.source)
    assert rows(spark, spec.target, "id", "_source_commit_version") == [(1, 2), (3, 1), (4, 4)]
    assert control.read_states()[spec.id]["last_commit_version"] == 4
    assert control.read_log(spec.id)[-1]["outcome"] == "REPAIRED"
