"""`status`, the Dagster checks and a run are derived from one assessment of a pipeline, so they
agree: here on a source reset that only the control table can reveal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.cli import main
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.assets.overview import OVERVIEW_KEY
from cdf_platform.orchestration.checks.silver_checks import CONSUMER_LAG, REPLAY_WINDOW
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.watermark import HISTORY_SCAN, read_silver_state
from cdf_platform_tests.bronze import make_bronze, rows
from cdf_platform_tests.lake_platform import control_for

PEOPLE = {"id": "people", "source": "bronze/people", "target": "silver/people", "keys": ["id"]}


def test_after_bronze_is_recreated_status_checks_and_run_all_report_the_source_reset(
    spark: SparkSession,
    spark_resource: SparkResource,
    lake: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Silver's recent log no longer names the bronze table id it follows (other writers made
    many commits since), bronze is recreated with as many versions as before: only the id the
    control table recorded shows the reset."""
    layout = control_for(lake, PEOPLE)
    spec, control = layout.spec("people"), layout.control()
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    first = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (first.mode, first.watermark_after) == (RunMode.INITIAL_LOAD, 1)
    silver = DeltaTable(spec.target)
    for n in range(HISTORY_SCAN):  # another writer's commits (here: table properties)
        silver.alter.set_table_properties({"delta.logRetentionDuration": f"interval {30 + n} days"})
    assert read_silver_state(spec.target, spec.id).source_table_id is None
    shutil.rmtree(spec.source)
    make_bronze(spark, spec.source, [(7, "eve", 70)])  # versions 0 and 1 again, a new table id

    assert main(
        ["status", "--json", "--pipelines", layout.pipelines_file, "--lake-root", str(lake)]
    )
    (status,) = json.loads(capsys.readouterr().out)
    assert (status["state"], status["problem_code"]) == ("LOST", "SOURCE_RESET")

    defs = build_defs(layout, spark_resource)
    checks = defs.resolve_job_def("checks_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False
    )
    evaluations = {
        e.check_name: e
        for e in checks.get_asset_check_evaluations()
        if e.asset_key == silver_key("people")
    }
    window = evaluations[REPLAY_WINDOW]
    assert (window.passed, window.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert window.metadata["state"].value == "LOST"
    assert window.metadata["problem_code"].value == "SOURCE_RESET"
    assert evaluations[CONSUMER_LAG].metadata["state"].value == "LOST"
    (overview,) = [
        m.materialization
        for m in checks.get_asset_materialization_events()
        if m.materialization.asset_key == OVERVIEW_KEY
    ]
    table = overview.metadata["pipelines"].value
    assert "| people | LOST |" in table and table.endswith("- people: SOURCE_RESET")
    assert overview.metadata["unhealthy_pipelines"].value == 1

    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (result.mode, result.incident_code) == (RunMode.REBUILD, "SOURCE_RESET")
    assert rows(spark, spec.target) == [(7, "eve", 70)]
