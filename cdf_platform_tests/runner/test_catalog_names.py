"""Pipelines that name their tables in Spark's catalog (`schema.table`): located by the run,
recorded for the JVM-free parts, silver registered, a moved source a `SourceReset` (unknown
names, non-Delta tables and missing schemas are rows of the bad-input catalogue).

The catalog is the test session's in-memory one under a temp warehouse: the platform asks it
only through SQL (`DESCRIBE DETAIL`, `DESCRIBE SCHEMA`, `CREATE TABLE ... LOCATION`) and
`spark.catalog`, as it would a Hive metastore. A Derby-backed metastore admits one JVM at a
time, and the suite shares one SparkSession.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml
from pyspark.sql import SparkSession

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import parse_specs
from cdf_platform.definitions import build_defs
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.table.catalog import plain_location
from cdf_platform_tests.bronze import control_for
from cdf_platform_tests.cli_process import run_cli

COLUMNS = "id BIGINT, name STRING, amount INT"


def _schemas(spark: SparkSession) -> tuple[str, str]:
    """Fresh bronze and silver schemas (the in-memory catalog outlives a test)."""
    suffix = uuid.uuid4().hex[:8]
    bronze, silver = f"bronze_{suffix}", f"silver_{suffix}"
    for schema in (bronze, silver):
        spark.sql(f"CREATE SCHEMA {schema}")
    return bronze, silver


def _bronze_table(spark: SparkSession, name: str, location: str | None = None) -> None:
    where = f" LOCATION '{location}'" if location else ""
    spark.sql(
        f"CREATE TABLE {name} ({COLUMNS}) USING DELTA{where} "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )


def _rows(spark: SparkSession, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in spark.table(name).select("id", "name", "amount").collect())


def _location(spark: SparkSession, name: str) -> str:
    return plain_location(spark.sql(f"DESCRIBE DETAIL {name}").collect()[0]["location"])


def test_names_are_told_from_paths_and_compared_case_insensitively() -> None:
    named = PipelineSpec(id="o", source="Bronze.Orders", target="main.silver.orders", keys=["id"])
    assert (named.source, named.target) == ("bronze.orders", "main.silver.orders")
    assert named.table_names == {"source": "bronze.orders", "target": "main.silver.orders"}
    assert named.bronze_name == "orders"
    assert named.resolved("/lake").source == "bronze.orders"
    paths = PipelineSpec(id="p", source="bronze/orders", target="./orders.v2", keys=["id"])
    assert paths.table_names == {}
    assert paths.resolved("/lake").target == "/lake/orders.v2"
    with pytest.raises(InvalidPipelineSpec, match="same table"):
        parse_specs({"pipelines": [{"id": "x", "source": "b.T", "target": "B.t", "keys": ["id"]}]})


def test_a_named_pipeline_runs_registers_silver_and_answers_status_without_a_jvm(
    spark: SparkSession, lake: Path, tmp_path: Path
) -> None:
    bronze_schema, silver_schema = _schemas(spark)
    bronze, silver = f"{bronze_schema}.orders", f"{silver_schema}.orders"
    _bronze_table(spark, bronze)
    spark.sql(f"INSERT INTO {bronze} VALUES (1, 'ada', 10), (2, 'bob', 20), (3, 'cy', 30)")
    spec = PipelineSpec(id="orders", source=bronze, target=silver, keys=["id"])
    control = control_for(lake)

    before = pipeline_status(spec, control)
    assert before.state is WindowState.NOT_STARTED
    assert before.problem_code == "TABLE_NAME_NOT_LOCATED"
    assert "cdf-platform run orders" in str(before.problem)

    first = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (first.mode, first.watermark_after) == (RunMode.INITIAL_LOAD, 1)
    assert spark.catalog.tableExists(silver)
    assert _rows(spark, silver) == _rows(spark, bronze)
    located = control.read_locations()
    warehouse = plain_location(spark.conf.get("spark.sql.warehouse.dir") or "")
    assert located[bronze]["location"] == _location(spark, bronze)
    assert located[silver]["location"] == f"{warehouse}/{silver_schema}.db/orders"
    assert _location(spark, silver) == located[silver]["location"]
    # The run that created silver records its table id too (it located the name before).
    silver_id = DeltaLog(located[silver]["location"]).table_id()
    assert located[silver]["table_id"] == silver_id
    assert control.read_states()["orders"]["source"] == located[bronze]["location"]

    spark.sql(f"UPDATE {bronze} SET amount = 11 WHERE id = 1")
    spark.sql(f"DELETE FROM {bronze} WHERE id = 2")
    spark.sql(f"INSERT INTO {bronze} VALUES (4, 'dee', 40)")
    second = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (second.mode, second.watermark_after) == (RunMode.INCREMENTAL, 4)
    assert _rows(spark, silver) == [(1, "ada", 11), (3, "cy", 30), (4, "dee", 40)]

    # After its first run, `status` reads the recorded locations: no Java anywhere.
    pipelines = tmp_path / "pipelines.yaml"
    document = {"pipelines": [{"id": "orders", "source": bronze, "target": silver, "keys": ["id"]}]}
    pipelines.write_text(yaml.safe_dump(document), encoding="utf-8")
    spark.sql(f"INSERT INTO {bronze} VALUES (5, 'eve', 50)")
    no_java = {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": str(Path(sys.executable).parent)}
    args = ["--pipelines", str(pipelines), "--lake-root", str(lake)]
    completed = run_cli("status", "--json", *args, env=no_java)
    assert completed.returncode == 0, completed.stderr
    (status,) = json.loads(completed.stdout)
    assert (status["state"], status["watermark"], status["latest_version"]) == ("OK", 4, 5)


def test_a_source_name_recreated_elsewhere_is_a_source_reset_and_rebuilt(
    spark: SparkSession, lake: Path
) -> None:
    bronze_schema, silver_schema = _schemas(spark)
    bronze, silver = f"{bronze_schema}.orders", f"{silver_schema}.orders"
    first_home = str(lake / "bronze_first")
    _bronze_table(spark, bronze, first_home)
    spark.sql(f"INSERT INTO {bronze} VALUES (1, 'ada', 10), (2, 'bob', 20)")
    spec = PipelineSpec(id="orders", source=bronze, target=silver, keys=["id"])
    control = control_for(lake)
    PipelineRunner.on(control, lambda: spark).run(spec)

    # Dropped (an external table: its files stay, and nothing new lands there) and created
    # again elsewhere with other rows.
    spark.sql(f"DROP TABLE {bronze}")
    _bronze_table(spark, bronze, str(lake / "bronze_second"))
    spark.sql(f"INSERT INTO {bronze} VALUES (7, 'gus', 70)")
    rebuilt = PipelineRunner.on(control, lambda: spark).run(spec)

    assert rebuilt.mode is RunMode.REBUILD
    assert rebuilt.incident_code == "SOURCE_RESET"
    assert "bronze_first" in str(rebuilt.incident_message)
    assert _rows(spark, silver) == [(7, "gus", 70)]
    assert control.read_locations()[bronze]["location"] == str(lake / "bronze_second")
    assert pipeline_status(spec, control).state is WindowState.OK


def test_the_sensor_requests_one_run_to_locate_a_new_name_then_reads_its_log(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    bronze_schema, silver_schema = _schemas(spark)
    bronze = f"{bronze_schema}.orders"
    _bronze_table(spark, bronze)
    spark.sql(f"INSERT INTO {bronze} VALUES (1, 'ada', 10)")
    pipelines = lake / "pipelines.yaml"
    document = {
        "pipelines": [
            {"id": "orders", "source": bronze, "target": f"{silver_schema}.orders", "keys": ["id"]}
        ]
    }
    pipelines.write_text(yaml.safe_dump(document), encoding="utf-8")
    defs = build_defs(
        LakeLayout(lake_root=str(lake), pipelines_file=str(pipelines)), spark_resource
    )
    sensor = defs.resolve_sensor_def("incremental_sensor")
    resources = {key: (defs.resources or {})[key] for key in sensor.required_resource_keys}

    instance = dg.DagsterInstance.ephemeral()

    def tick() -> Any:
        with dg.build_sensor_context(
            definitions=defs, resources=resources, instance=instance
        ) as context:
            return sensor(context)

    (request,) = tick().run_requests
    assert request.run_key == "locate:orders:first"
    run = defs.resolve_job_def("incremental_job").execute_in_process(
        instance=instance, asset_selection=request.asset_selection, tags=request.tags
    )
    assert run.success
    assert not tick().run_requests
    spark.sql(f"INSERT INTO {bronze} VALUES (2, 'bob', 20)")
    (after,) = tick().run_requests
    assert after.run_key == "incremental:orders:2"
