"""The maintenance job: consumer-aware VACUUM with its decision and sizing in the run metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from pyspark.sql import SparkSession

from cdf_platform.core.sql import sql_path
from cdf_platform.orchestration.maintenance_jobs import build_maintenance_jobs, maintenance_job_name
from cdf_platform.orchestration.resources import LakeLayout, SparkResource
from cdf_platform.runner import run_pipeline
from cdf_platform_tests.bronze import insert, make_bronze, set_deleted_file_retention, sql

PIPELINE = {"id": "people", "source": "bronze/people", "target": "silver/people", "keys": ["id"]}


def _lagging_platform(spark: SparkSession, lake: Path) -> LakeLayout:
    """bronze/people keeps 1 hour of deleted files; its consumer is behind by an update."""
    pipelines = lake / "pipelines.yaml"
    pipelines.write_text(yaml.safe_dump({"pipelines": [PIPELINE]}), encoding="utf-8")
    control = LakeLayout(lake_root=str(lake), pipelines_file=str(pipelines))
    spec = control.spec("people")
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    set_deleted_file_retention(spark, spec.source, "interval 1 hours")
    run_pipeline(spec, spark_factory=lambda: spark, control=control.control())
    sql(spark, spec.source, "UPDATE {t} SET amount = amount + 1")
    insert(spark, spec.source, [(3, "cy", 30)])
    return control


def _run(
    spark_resource: SparkResource, lake: Path, control: LakeLayout, **config: Any
) -> tuple[dg.ExecuteInProcessResult, dg.DagsterInstance]:
    (job,) = build_maintenance_jobs(control.specs())
    assert job.name == maintenance_job_name("people")
    instance = dg.DagsterInstance.ephemeral()
    result = job.execute_in_process(
        run_config={"ops": {"vacuum_people": {"config": {"listing_parallelism": 2, **config}}}},
        resources={"spark": spark_resource, "lake": control},
        instance=instance,
        raise_on_error=False,
    )
    return result, instance


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
    spec = control.spec("people")
    assert _retention(spark, spec.source) == "interval 7 hours"
    after = run_pipeline(spec, spark_factory=lambda: spark, control=control.control())
    assert after.mode.value == "incremental"


def test_vacuums_when_every_consumer_is_safe(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    control = _lagging_platform(spark, lake)
    spec = control.spec("people")
    run_pipeline(spec, spark_factory=lambda: spark, control=control.control())
    result, instance = _run(spark_resource, lake, control, buffer_hours=0.5)
    assert result.success
    figures = _metadata(instance)
    assert figures["action"] == "VACUUM"
    assert figures["files_deleted"] >= 0
    assert _retention(spark, spec.source) == "interval 1 hours"
