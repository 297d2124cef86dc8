"""A run process whose small incremental silver run starts the driver JVM starts it lean
(`SparkResource.lean_short_runs`): serial collector and C1 only, unless the driver's JVM
options are set anywhere else, and never for a rebuild, a first load or a large change set."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.plan import RunMode, plan_run
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.runtime.session_conf import (
    DRIVER_JAVA_OPTIONS,
    SHORT_RUN_JAVA_OPTIONS,
    SUBMIT_OPTS_ENV,
    SparkSettings,
    short_run_java_options,
    spark_conf,
    starting_conf,
)
from cdf_platform_tests.bronze import control_for, make_bronze, spec_for, sql
from cdf_platform_tests.cli_process import python_json

LEAN = SHORT_RUN_JAVA_OPTIONS.split()

# A run process: the platform's definitions on the lake, its silver materialized, and the
# options its driver JVM was started with printed.
RUN_PROCESS = """
import json, sys
import dagster as dg
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource

lake, lean = sys.argv[1], sys.argv[2] == "on"
spark = SparkResource(master="local[1]", shuffle_partitions=1, lean_short_runs=lean)
layout = LakeLayout(lake_root=lake, pipelines_file=lake + "/pipelines.yaml")
defs = build_defs(layout, spark, automation=False)
key = silver_key("people")
result = dg.materialize(
    [*defs.assets, *defs.asset_checks],
    selection=dg.AssetSelection.assets(key),
    resources=dict(defs.resources),
    instance=dg.DagsterInstance.ephemeral(),
)
(materialized,) = result.asset_materializations_for_node(key.to_python_identifier())
metadata = materialized.metadata
runtime = spark.spark_session._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print(json.dumps({
    "mode": metadata["mode"].value,
    "jvm": [a for a in runtime.getInputArguments() if a.startswith("-XX:")],
}))
"""


def _run_process(lake: Path, lean: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "SPARK_CONF_DIR")}
    return python_json(RUN_PROCESS, str(lake), lean, env=env)


def test_a_run_process_starts_its_jvm_lean_for_a_small_incremental_run_only(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A run through Spark (this small SCD1 change set would need none).
    monkeypatch.setenv(JVM_FREE_MERGE_MAX_ROWS_ENV, "0")
    spec = spec_for(lake)
    (lake / "pipelines.yaml").write_text(
        f"pipelines:\n  - id: people\n    source: {spec.source}\n    target: {spec.target}\n"
        "    keys: [id]\n",
        encoding="utf-8",
    )
    make_bronze(spark, spec.source, [(1, "a", 10), (2, "b", 20)])
    assert not plan_run(spec).is_small_incremental()  # a first load

    sql(spark, spec.source, "UPDATE {t} SET amount = 21 WHERE id = 2")
    # The first load is this process's; the run process gets an incremental run of one change.
    PipelineRunner.on(control_for(lake), lambda: spark).run(spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = 22 WHERE id = 2")
    plan = plan_run(spec)
    assert plan.mode is RunMode.INCREMENTAL and plan.is_small_incremental()

    found = _run_process(lake, "on")
    assert found["mode"] == "incremental"
    assert set(LEAN) <= set(found["jvm"]), found

    caught_up = plan_run(spec)
    assert caught_up.mode is RunMode.NOOP and not caught_up.is_small_incremental()


def test_the_lean_options_yield_to_driver_options_set_anywhere_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (SUBMIT_OPTS_ENV, "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    plain = SparkSettings(short_run=True)
    assert short_run_java_options(plain) == SHORT_RUN_JAVA_OPTIONS

    assert SparkResource().settings(short_run=True).short_run
    assert not SparkResource(lean_short_runs=False).settings(short_run=True).short_run

    own = SparkSettings(short_run=True, extra_conf={"spark.driver.extraJavaOptions": "-Da=1"})
    assert short_run_java_options(own) is None
    for line in (
        "spark.driver.extraJavaOptions -XX:+UseG1GC",
        "  spark.driver.extraJavaOptions=-XX:+UseG1GC",
        "spark.driver.extraJavaOptions: -XX:+UseG1GC",
    ):
        (tmp_path / "spark-defaults.conf").write_text(f"spark.master local[1]\n{line}\n")
        assert short_run_java_options(plain) is None, line
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.extraJavaOptionsX 1\n")
    assert short_run_java_options(plain) == SHORT_RUN_JAVA_OPTIONS
    for name in (SUBMIT_OPTS_ENV, "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS"):
        with monkeypatch.context() as scoped:
            scoped.setenv(name, "-XX:+UseParallelGC")
            assert short_run_java_options(plain) is None, name


def test_the_lean_options_are_passed_in_the_conf_the_jvm_starts_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in (SUBMIT_OPTS_ENV, "JDK_JAVA_OPTIONS", "JAVA_TOOL_OPTIONS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    before = dict(os.environ)
    short = SparkSettings(short_run=True)
    assert starting_conf(short) == {
        **spark_conf(short),
        DRIVER_JAVA_OPTIONS: SHORT_RUN_JAVA_OPTIONS,
    }
    assert starting_conf(SparkSettings()) == spark_conf(SparkSettings())
    own = SparkSettings(short_run=True, extra_conf={DRIVER_JAVA_OPTIONS: "-Da=1"})
    assert starting_conf(own)[DRIVER_JAVA_OPTIONS] == "-Da=1"
    # A running session's conf never names them; the process's environment is not touched.
    assert DRIVER_JAVA_OPTIONS not in spark_conf(short)
    assert dict(os.environ) == before
