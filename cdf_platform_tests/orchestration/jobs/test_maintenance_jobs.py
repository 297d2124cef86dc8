"""The maintenance job: consumer-aware VACUUM with its decision and sizing in the run metadata."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from pyspark.sql import SparkSession

from cdf_platform.core.config import default_allow_destructive
from cdf_platform.core.errors import RuntimeEnvironmentError
from cdf_platform.core.sql import sql_path
from cdf_platform.orchestration.jobs.maintenance_jobs import (
    MAINTENANCE_JOB,
    build_maintenance_job,
    build_maintenance_schedule,
    maintenance_run_config,
)
from cdf_platform.orchestration.shared.keys import TABLE_TAG, silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.run import PipelineRunner
from cdf_platform_tests.bronze import insert, make_bronze, set_deleted_file_retention, sql
from cdf_platform_tests.lake_platform import failure_incident

PIPELINE = {"id": "people", "source": "bronze/people", "target": "silver/people", "keys": ["id"]}


def _lagging_platform(spark: SparkSession, lake: Path) -> LakeLayout:
    """bronze/people keeps 1 hour of deleted files; its consumer is behind by an update."""
    pipelines = lake / "pipelines.yaml"
    pipelines.write_text(yaml.safe_dump({"pipelines": [PIPELINE]}), encoding="utf-8")
    control = LakeLayout(lake_root=str(lake), pipelines_file=str(pipelines))
    spec = control.spec("people")
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    set_deleted_file_retention(spark, spec.source, "interval 1 hours")
    PipelineRunner.on(control.control(), lambda: spark).run(spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = amount + 1")
    insert(spark, spec.source, [(3, "cy", 30)])
    return control


def _run(
    spark_resource: SparkResource,
    lake: Path,
    control: LakeLayout,
    *,
    allow_destructive: bool = False,
    tags: dict[str, str] | None = None,
    **config: Any,
) -> tuple[dg.ExecuteInProcessResult, dg.DagsterInstance]:
    job, tables = build_maintenance_job(control.specs(), allow_destructive=allow_destructive)
    assert (job.name, tables) == (MAINTENANCE_JOB, ["bronze/people"])
    instance = dg.DagsterInstance.ephemeral()
    result = job.execute_in_process(
        run_config=maintenance_run_config("bronze/people", listing_parallelism=2, **config),
        resources={"spark": spark_resource, "lake": control},
        instance=instance,
        raise_on_error=False,
        tags=tags,
    )
    return result, instance


def _files(path: str) -> list[str]:
    """Every file of the table at `path` but its log: what a VACUUM deletes from."""
    root = Path(path)
    return sorted(
        str(f.relative_to(root))
        for f in root.rglob("*")
        if f.is_file() and "_delta_log" not in f.parts
    )


def _operations(spark: SparkSession, path: str) -> list[str]:
    history = spark.sql(f"DESCRIBE HISTORY {sql_path(path)}").collect()
    return [str(row["operation"]) for row in history]


def _metadata(instance: dg.DagsterInstance) -> dict[str, Any]:
    """The maintenance decision observed on the bronze asset, read back from the instance."""
    (record,) = instance.fetch_observations(dg.AssetKey(["bronze", "people"]), limit=5).records
    observation = record.asset_observation
    assert observation is not None
    return {k: v.value for k, v in observation.metadata.items()}


def _retention(spark: SparkSession, path: str) -> str:
    detail = spark.sql(f"DESCRIBE DETAIL {sql_path(path)}").collect()[0]
    return str(detail["properties"]["delta.deletedFileRetentionDuration"])


def test_refuses_when_a_consumer_needs_more_history_than_the_cap(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    control = _lagging_platform(spark, lake)
    result, instance = _run(spark_resource, lake, control, buffer_hours=6, max_retention_hours=2)
    assert not result.success
    figures = _metadata(instance)
    assert figures["action"] == "REFUSE"
    assert figures["deleted_file_retention_hours"] == 1
    assert 6 <= figures["required_retention_hours"] < 6.5
    assert "recommended_retention_hours" in figures
    assert [c["consumer"] for c in figures["consumers"]] == ["people"]
    assert _retention(spark, control.spec("people").source) == "interval 1 hours"


def test_raises_retention_then_vacuums_and_the_consumer_still_replays(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    control = _lagging_platform(spark, lake)
    result, instance = _run(spark_resource, lake, control, buffer_hours=6)
    assert result.success
    figures = _metadata(instance)
    assert figures["action"] == "RAISE_RETENTION_AND_VACUUM"
    assert figures["new_deleted_file_retention_hours"] == 7
    # Recorded in the maintenance log as destroying nothing.
    (row,) = control.control().read_maintenance_log()
    assert (row["action"], row["outcome"], row["destructive"]) == (
        "RAISE_RETENTION_AND_VACUUM",
        "vacuumed",
        False,
    )
    assert (row["destroyed"], row["permitted_by"], row["windows_cut"]) == (None, None, "[]")
    spec = control.spec("people")
    assert _retention(spark, spec.source) == "interval 7 hours"
    after = PipelineRunner.on(control.control(), lambda: spark).run(spec)
    assert after.mode.value == "incremental"


def test_vacuums_when_every_consumer_is_safe(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    control = _lagging_platform(spark, lake)
    spec = control.spec("people")
    PipelineRunner.on(control.control(), lambda: spark).run(spec)
    result, instance = _run(spark_resource, lake, control, buffer_hours=0.5)
    assert result.success
    figures = _metadata(instance)
    assert figures["action"] == "VACUUM"
    assert figures["files_deleted"] >= 0
    assert _retention(spark, spec.source) == "interval 1 hours"


def test_destructive_settings_are_refused_unless_the_deployment_permits_them(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    control = _lagging_platform(spark, lake)
    source = control.spec("people").source
    files, operations = _files(source), _operations(spark, source)
    for destructive in ({"retain_zero": True, "allow_window_loss": True}, {"retain_zero": True}):
        result, _instance = _run(spark_resource, lake, control, **destructive)
        assert not result.success
        assert failure_incident(result) == "DESTRUCTIVE_ACTION_NOT_PERMITTED"
        assert (_files(source), _operations(spark, source)) == (files, operations)
    log = control.control().read_maintenance_log(source)
    assert [(row["action"], row["outcome"], row["destructive"]) for row in log] == [
        ("vacuum", "not_permitted", True)
    ] * 2


def test_a_permitted_destructive_vacuum_runs_and_is_recorded_with_who_asked(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    control = _lagging_platform(spark, lake)
    source = control.spec("people").source
    files = _files(source)
    result, instance = _run(
        spark_resource,
        lake,
        control,
        allow_destructive=True,
        tags={"dagster/user": "operator@example.com"},
        retain_zero=True,
        allow_window_loss=True,
    )
    assert result.success
    assert len(_files(source)) < len(files)
    figures = _metadata(instance)
    assert (figures["action"], figures["destructive"]) == ("VACUUM_RETAIN_ZERO", True)
    assert figures["windows_cut"] == ["people"]
    assert figures["permitted_by"] == "CDF_ALLOW_DESTRUCTIVE=1"
    assert "lose their replay window" in figures["destroyed"]
    (row,) = control.control().read_maintenance_log(source)
    assert (row["run_id"], row["job"], row["action"], row["outcome"]) == (
        result.run_id,
        MAINTENANCE_JOB,
        "VACUUM_RETAIN_ZERO",
        "vacuumed",
    )
    assert (row["destructive"], row["permitted_by"], json.loads(row["windows_cut"])) == (
        True,
        "CDF_ALLOW_DESTRUCTIVE=1",
        ["people"],
    )
    assert row["files_deleted"] == figures["files_deleted"] > 0
    assert json.loads(row["tags"])["dagster/user"] == "operator@example.com"


def test_the_permission_is_the_environments_and_a_typo_in_it_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CDF_ALLOW_DESTRUCTIVE", raising=False)
    assert default_allow_destructive() is False
    for value, permitted in (("1", True), ("on", True), ("", False), ("0", False), ("no", False)):
        monkeypatch.setenv("CDF_ALLOW_DESTRUCTIVE", value)
        assert default_allow_destructive() is permitted, value
    monkeypatch.setenv("CDF_ALLOW_DESTRUCTIVE", "ture")
    with pytest.raises(RuntimeEnvironmentError, match="CDF_ALLOW_DESTRUCTIVE='ture'"):
        default_allow_destructive()


def test_one_job_vacuums_the_table_its_run_config_names_and_the_schedule_asks_for_each(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    control = _lagging_platform(spark, lake)
    specs = [*control.specs(), control.spec("people").model_copy(update={"id": "people2"})]
    job, tables = build_maintenance_job(specs, {silver_key("people")})
    # A bronze table two pipelines read is one table; a silver table consumer assets read is
    # one too.
    assert tables == ["bronze/people", "silver/people"]
    schedule = build_maintenance_schedule(job, tables)
    night = datetime.datetime(2026, 12, 5, 3, tzinfo=datetime.UTC)
    with dg.build_schedule_context(scheduled_execution_time=night) as context:
        requests = schedule.evaluate_tick(context).run_requests or []
    assert [(r.run_key, r.tags[TABLE_TAG]) for r in requests] == [
        ("bronze/people:2026-12-05", "bronze/people"),
        ("silver/people:2026-12-05", "silver/people"),
    ]
    assert requests[0].run_config == maintenance_run_config("bronze/people")

    # A table the deployment does not maintain: a classified failure, nothing done.
    source = control.spec("people").source
    files = _files(source)
    instance = dg.DagsterInstance.ephemeral()
    unknown = job.execute_in_process(
        run_config=maintenance_run_config("bronze/peeple"),
        resources={"spark": spark_resource, "lake": control},
        instance=instance,
        raise_on_error=False,
    )
    assert failure_incident(unknown) == "INVALID_RUN_CONFIG"
    (failure,) = [e for e in unknown.all_events if e.is_step_failure]
    assert "set `table` to one of bronze/people, silver/people" in str(failure.step_failure_data)
    assert _files(source) == files
    assert not control.control().read_maintenance_log()
    # A run launched by hand (no tag) is tagged with its table, to find it among the runs.
    result, instance = _run(spark_resource, lake, control, buffer_hours=0.5)
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags[TABLE_TAG] == "bronze/people"
