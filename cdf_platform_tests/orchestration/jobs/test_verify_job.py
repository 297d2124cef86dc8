"""`cdf-platform verify` and the Dagster `verify_job` on a real lake and instance: a foreign
UPDATE is named, repaired where the spec says `verify_repair: auto`, an opted-out pipeline is
left out, and the weekly schedule is defined."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.cli import main
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.jobs.verify_job import VERIFY_JOB, VERIFY_SCHEDULE, verify_op_name
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.run import PipelineRunner
from cdf_platform.state.verifications import read_verifications
from cdf_platform_tests.bronze import make_bronze, rows, sql
from cdf_platform_tests.lake_platform import control_for

PEOPLE = {"id": "people", "source": "bronze/people", "target": "silver/people", "keys": ["id"]}
# Opted out of the weekly verification.
PETS = {**PEOPLE, "id": "pets", "source": "bronze/pets", "target": "silver/pets", "verify": False}


def _lake(spark: SparkSession, lake: Path, **people: Any) -> tuple[str, str]:
    """Both pipelines run once; returns the pipelines file and people's silver."""
    layout = control_for(lake, {**PEOPLE, **people}, PETS)
    for spec in layout.specs():
        make_bronze(spark, spec.source, [(i, f"n{i}", i) for i in range(1, 21)])
        PipelineRunner.on(layout.control(), lambda: spark).run(spec)
    return str(lake / "pipelines.yaml"), str(lake / "silver" / "people")


def test_the_verify_command_names_a_foreign_update_and_repairs_it(
    spark: SparkSession, lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipelines, silver = _lake(spark, lake)
    common = ["--pipelines", pipelines, "--lake-root", str(lake)]
    sql(spark, silver, "UPDATE {t} SET amount = 0 WHERE id = 7")

    capsys.readouterr()
    assert main(["verify", *common, "--json"]) == 1  # a difference left: exit 1
    (found,) = json.loads(capsys.readouterr().out)  # pets opted out: not verified
    assert (found["pipeline_id"], found["outcome"], found["differing_keys"]) == (
        "people",
        "DIFFERENT",
        1,
    )
    assert found["sample_keys"] == [{"id": 7, "difference": "changed"}]

    assert main(["verify", *common, "--pipeline", "people", "--repair"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("people: REPAIRED") and "{'id': 7, 'difference': 'changed'}" in text
    assert rows(spark, silver) == [(i, f"n{i}", i) for i in range(1, 21)]

    assert main(["verify", *common, "--pipeline", "pets"]) == 0  # named: verified anyway
    assert "pets: EQUAL" in capsys.readouterr().out


def test_verify_job_repairs_where_the_spec_says_auto_and_skips_an_opted_out_pipeline(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    _, silver = _lake(spark, lake, verify_repair="auto")
    sql(spark, silver, "DELETE FROM {t} WHERE id = 3")
    before = DeltaTable(silver).version()
    defs = build_defs(control_for(lake, {**PEOPLE, "verify_repair": "auto"}, PETS), spark_resource)
    schedule = defs.get_schedule_def(VERIFY_SCHEDULE)
    assert schedule.cron_schedule == "0 4 * * 0" and schedule.job_name == VERIFY_JOB
    instance = dg.DagsterInstance.ephemeral()

    result = defs.get_job_def(VERIFY_JOB).execute_in_process(instance=instance)

    assert result.success
    metadata = {
        event.step_key: event.step_output_data.metadata
        for event in result.all_node_events
        if event.is_successful_output
    }
    assert metadata[verify_op_name("pets")]["outcome"].value == "SKIPPED"
    figures = metadata[verify_op_name("people")]
    assert figures["outcome"].value == "REPAIRED"
    assert figures["differing_keys"].value == 1
    assert figures["sample_keys"].value == [{"id": 3, "difference": "missing"}]
    assert figures["repaired_silver_version"].value == before + 1
    (observed,) = instance.fetch_observations(dg.AssetKey(["silver", "people"]), limit=5).records
    assert observed.asset_observation is not None
    assert observed.asset_observation.metadata["outcome"].value == "REPAIRED"
    assert [v.outcome.value for v in read_verifications(control_for(lake).control(), "people")] == [
        "REPAIRED"
    ]
    assert rows(spark, silver) == [(i, f"n{i}", i) for i in range(1, 21)]
