"""The platform on a lake in a real S3 server: bronze, silver and the control tables all on S3,
Spark through s3a, the JVM-free side through obstore and deltalake."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import ReplayWindowLost
from cdf_platform.core.faults import FAULT_ENV, FAULT_EXIT_CODE, FaultPoint
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.jobs.maintenance_jobs import (
    build_maintenance_job,
    maintenance_run_config,
)
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_testkit.objects import delete_object, object_names
from cdf_platform_tests.bronze import (
    assert_converged_after_kill,
    insert,
    make_bronze,
    rows,
    set_deleted_file_retention,
    sql,
    vacuum_retain_zero,
)
from cdf_platform_tests.cli_process import run_cli
from cdf_platform_tests.lake_platform import last_spark_job_id

PEOPLE = {"id": "people", "source": "bronze/people", "target": "silver/people", "keys": ["id"]}


def _layout(s3_lake: str, tmp_path: Path, **fields: Any) -> LakeLayout:
    pipelines = tmp_path / "pipelines.yaml"
    pipelines.write_text(yaml.safe_dump({"pipelines": [{**PEOPLE, **fields}]}), encoding="utf-8")
    return LakeLayout(lake_root=s3_lake, pipelines_file=str(pipelines))


def _cli(layout: LakeLayout, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`cdf-platform <args>` on the S3 lake, configured as a user would: CDF_LAKE_ROOT."""
    return run_cli(
        *args, "--pipelines", layout.pipelines_file, env={"CDF_LAKE_ROOT": layout.lake_root, **env}
    )


def _change_files(table: str) -> list[str]:
    """The table's `_change_data` files (S3A also leaves an empty `_change_data/` marker)."""
    return [name for name in object_names(table, "_change_data") if "/" in name]


def test_load_increment_lose_the_window_and_rebuild_on_s3(
    spark: SparkSession, s3_lake: str, tmp_path: Path
) -> None:
    layout = _layout(s3_lake, tmp_path, delete_mode="hard")
    spec, control = layout.spec("people"), layout.control()
    assert spec.source.startswith("s3://") and control.root.startswith("s3://")
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])  # 0, 1
    first = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (first.mode, first.end_version) == (RunMode.INITIAL_LOAD, 1)

    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 2
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")  # 3
    insert(spark, spec.source, [(4, "dee", 40)])  # 4
    second = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (second.mode, second.start_version, second.end_version) == (RunMode.INCREMENTAL, 2, 4)
    assert rows(spark, spec.target) == rows(spark, spec.source)

    # The consumer pauses; bronze changes; VACUUM deletes the change files it needs.
    sql(spark, spec.source, "UPDATE {t} SET amount = 31 WHERE id = 3")  # 5
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 4")  # 6
    vacuum_retain_zero(spark, spec.source)  # no commit: VACUUM logging is off by default
    assert not _change_files(spec.source)

    # status --json reports the loss from the logs on S3, before any read, with no JVM at all.
    no_java = {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": str(Path(sys.executable).parent)}
    status = _cli(layout, "status", "--json", env=no_java)
    assert status.returncode == 1, status.stderr
    (figures,) = json.loads(status.stdout)
    assert (figures["state"], figures["watermark"], figures["latest_version"]) == ("LOST", 4, 6)
    assert figures["problem_code"] == "WATERMARK_OUTSIDE_RETENTION"
    assert figures["earliest_replayable_version"] > 5
    assert "_change_data" in figures["problem"]

    rebuilt = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (rebuilt.mode, rebuilt.end_version) == (RunMode.REBUILD, 6)
    assert rebuilt.incident_code == "WATERMARK_OUTSIDE_RETENTION"
    assert rows(spark, spec.target) == rows(spark, spec.source) == [(1, "ada", 11), (3, "cy", 31)]
    assert read_silver_state(spec.target, spec.id).watermark == 6
    assert control.read_states()["people"]["last_commit_version"] == 6
    assert [row["mode"] for row in control.read_log("people")] == [
        "initial_load",
        "incremental",
        "rebuild",
    ]


def test_a_run_killed_after_the_merge_on_s3_converges_exactly(
    spark: SparkSession, s3_lake: str, tmp_path: Path
) -> None:
    layout = _layout(s3_lake, tmp_path, delete_mode="soft", fallback_mode="FAIL_FAST")
    spec, control = layout.spec("people"), layout.control()
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])  # 0, 1
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 2
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")  # 3

    # The CLI on CDF_LAKE_ROOT=s3://... starts its own Spark with the S3 connector, merges,
    # and dies before it writes the control table.
    killed = _cli(
        layout,
        "run",
        "people",
        env={FAULT_ENV: FaultPoint.BEFORE_CONTROL.value, "CDF_SPARK_MASTER": "local[1]"},
    )
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr[-3000:]
    assert read_silver_state(spec.target, spec.id).watermark == 3  # atomic with the MERGE
    assert control.read_states()["people"]["last_commit_version"] == 1

    rerun = PipelineRunner.on(control, lambda: spark).run(spec)
    assert rerun.mode is RunMode.NOOP
    assert_converged_after_kill(spark, spec, control)


def test_a_commit_deleted_inside_the_range_on_s3_is_caught_before_the_read(
    spark: SparkSession, s3_lake: str, tmp_path: Path
) -> None:
    layout = _layout(s3_lake, tmp_path, fallback_mode="FAIL_FAST")
    spec, control = layout.spec("people"), layout.control()
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])  # 0, 1
    PipelineRunner.on(control, lambda: spark).run(spec)
    insert(spark, spec.source, [(3, "cy", 30)])  # 2
    insert(spark, spec.source, [(4, "dee", 40)])  # 3
    insert(spark, spec.source, [(5, "eve", 50)])  # 4
    # A checkpoint after the hole keeps the table itself readable (deltalake writes it to S3).
    DeltaTable(spec.source).create_checkpoint()
    delete_object(spec.source, f"_delta_log/{3:020d}.json")

    # What a plain batch CDF read does: version 3's insert is skipped without an error.
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 2)
        .option("endingVersion", 4)
        .load(spec.source)
    )
    assert sorted(r.id for r in changes.collect()) == [3, 5]

    before = rows(spark, spec.target)
    with pytest.raises(ReplayWindowLost, match=r"00000000000000000003\.json is gone"):
        PipelineRunner.on(control, lambda: spark).run(spec)
    assert rows(spark, spec.target) == before
    assert read_silver_state(spec.target, spec.id).watermark == 1


def test_checks_and_sensor_on_s3_read_logs_only_and_maintenance_refuses(
    spark: SparkSession, spark_resource: SparkResource, s3_lake: str, tmp_path: Path
) -> None:
    layout = _layout(s3_lake, tmp_path, max_allowed_lag_hours=24, min_headroom_hours=1)
    defs = build_defs(layout, spark_resource)
    spec = layout.spec("people")
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    set_deleted_file_retention(spark, spec.source, "interval 1 hours")  # 2
    with dg.instance_for_test() as instance:
        assert defs.resolve_job_def("incremental_job").execute_in_process(instance=instance).success
        sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 3

        # Maintenance: the consumer needs version 3's change files for hours the cap refuses.
        maintenance, _ = build_maintenance_job(layout.specs())
        refused = maintenance.execute_in_process(
            run_config=maintenance_run_config(
                "bronze/people", buffer_hours=6, max_retention_hours=2
            ),
            resources={"spark": spark_resource, "lake": layout},
            instance=instance,
            raise_on_error=False,
        )
        assert not refused.success
        (record,) = instance.fetch_observations(dg.AssetKey(["bronze", "people"]), limit=5).records
        observation = record.asset_observation
        assert observation is not None
        assert observation.metadata["action"].value == "REFUSE"
        assert _change_files(spec.source)  # nothing vacuumed

        vacuum_retain_zero(spark, spec.source)
        spark_jobs = last_spark_job_id(spark)
        checks = defs.resolve_job_def("checks_job").execute_in_process(
            instance=instance, raise_on_error=False
        )
        (lost,) = [
            e
            for e in checks.get_asset_check_evaluations()
            if e.asset_key == silver_key("people") and e.check_name == REPLAY_WINDOW
        ]
        assert not lost.passed
        assert lost.metadata["state"].value == "LOST"
        assert lost.metadata["watermark"].value == 2

        sensor = defs.resolve_sensor_def("rebuild_sensor")
        resources = {k: (defs.resources or {})[k] for k in sensor.required_resource_keys}
        with dg.build_sensor_context(
            instance=instance, definitions=defs, resources=resources
        ) as context:
            tick = sensor(context)
        (request,) = tick.run_requests  # type: ignore[union-attr]
        assert request.asset_selection == [silver_key("people")]
        assert last_spark_job_id(spark) == spark_jobs  # checks and sensor read logs only
