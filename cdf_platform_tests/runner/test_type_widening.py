"""Bronze type changes on real Spark and Delta: a widening Delta allows is followed by silver (its
column widened, the load log says so) with no manual step; any other type change is refused
with fixes that work."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import IncompatibleSchemaChange
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform.window.replay_window import compute_replay_window
from cdf_platform_tests.bronze import control_for, rows, spec_for, sql


def _types(path: str) -> dict[str, Any]:
    """Column -> schema-JSON type of the Delta table at `path`, from its log."""
    schema = json.loads(DeltaTable(path).schema().to_json())
    return {f["name"]: f["type"] for f in schema["fields"]}


def _last_message(control: ControlTable, pipeline_id: str) -> str:
    return str(control.read_log(pipeline_id)[-1]["message"])


def test_bronze_type_widening_widens_silver_and_the_pipeline_carries_on(
    spark: SparkSession, lake: Path
) -> None:
    """Initial load with qty INT; bronze turns type widening on, widens qty to BIGINT, stores a
    value only BIGINT holds, inserts and deletes; the run widens silver (a rebuild: Delta's
    change feed is not read across the widening), and the next run, across a nested widening
    right after the watermark, is incremental."""
    spec = spec_for(lake, fallback_mode="SNAPSHOT_REBUILD")
    control = control_for(lake)
    sql(
        spark,
        spec.source,
        "CREATE TABLE {t} (id BIGINT, qty INT, dims STRUCT<w: SMALLINT>) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
    )
    sql(
        spark,
        spec.source,
        "INSERT INTO {t} VALUES (1, 10, named_struct('w', 1)), "
        "(2, 20, named_struct('w', 2)), (3, 30, named_struct('w', 3))",
    )  # 1
    assert PipelineRunner.on(control, lambda: spark).run(spec).watermark_after == 1

    sql(
        spark,
        spec.source,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableTypeWidening' = 'true')",
    )
    sql(spark, spec.source, "ALTER TABLE {t} ALTER COLUMN qty TYPE BIGINT")  # 3
    sql(spark, spec.source, "UPDATE {t} SET qty = 5000000000 WHERE id = 1")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (4, 40, named_struct('w', 4))")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")  # 6

    # delta-spark 4.4 refuses a batch change-feed read across the widening; one that starts at
    # it is fine. The window says exactly that, and status, plan and run agree.
    assert compute_replay_window(spec.source).earliest_replayable_version == 3
    with pytest.raises(Exception, match="DELTA_CHANGE_DATA_FEED_INCOMPATIBLE"):
        spark.read.format("delta").option("readChangeFeed", "true").option(
            "startingVersion", 2
        ).option("endingVersion", 6).load(spec.source).collect()
    status = pipeline_status(spec, control)
    assert (status.state, status.problem_code) == (WindowState.LOST, "INCOMPATIBLE_SCHEMA_CHANGE")
    assert "column qty widened int -> bigint" in str(status.problem)

    widened = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (widened.mode, widened.watermark_after) == (RunMode.REBUILD, 6)
    assert _types(spec.target)["qty"] == "long"
    assert rows(spark, spec.target) == [(1, 5_000_000_000, (1,)), (3, 30, (3,)), (4, 40, (4,))]
    assert "silver column qty widened int -> bigint" in _last_message(control, spec.id)

    # More changes, and a nested widening in the first version after the watermark: the read
    # starts at it (Delta checks schema changes after the start only), so it stays incremental.
    sql(spark, spec.source, "ALTER TABLE {t} ALTER COLUMN dims.w TYPE INT")  # 7
    sql(
        spark,
        spec.source,
        "UPDATE {t} SET qty = qty * 2, dims = named_struct('w', 70000) WHERE id IN (1, 3)",
    )  # 8
    assert pipeline_status(spec, control).state is WindowState.OK
    again = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (again.mode, again.start_version, again.watermark_after) == (RunMode.INCREMENTAL, 7, 8)
    assert _types(spec.target)["dims"]["fields"][0]["type"] == "integer"
    assert rows(spark, spec.target) == rows(spark, spec.source)
    assert rows(spark, spec.target, "id", "qty") == [(1, 10_000_000_000), (3, 60), (4, 40)]
    assert _last_message(control, spec.id) == "silver column dims.w widened smallint -> int"


def test_a_type_change_silver_cannot_follow_is_refused_with_fixes_that_work(
    spark: SparkSession, lake: Path
) -> None:
    """Bronze's qty goes from BIGINT to INT (an overwrite with a new schema): the rebuild refuses
    it naming two fixes, and each of them works."""
    spec = spec_for(lake, fallback_mode="SNAPSHOT_REBUILD")
    control = control_for(lake)
    frame = spark.createDataFrame([(1, 10), (2, 20)], "id BIGINT, qty BIGINT")
    frame.write.format("delta").option("delta.enableChangeDataFeed", "true").save(spec.source)
    PipelineRunner.on(control, lambda: spark).run(spec)
    narrower = spark.createDataFrame([(1, 11), (2, 20), (3, 30)], "id BIGINT, qty INT")
    narrower.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(
        spec.source
    )

    with pytest.raises(IncompatibleSchemaChange) as refused:
        PipelineRunner.on(control, lambda: spark).run(spec)
    message = str(refused.value)
    assert "column qty changed type from bigint to int" in message
    cast = 'qty: "CAST(qty AS bigint)"'
    assert cast in message and "`cdf-platform rebuild people`" in message
    assert rows(spark, spec.target) == [(1, 10), (2, 20)]

    # Fix 1: keep silver's type with the cast the message names.
    kept = spec_for(lake, fallback_mode="SNAPSHOT_REBUILD", columns={"qty": "CAST(qty AS bigint)"})
    result = PipelineRunner.on(control, lambda: spark).run(kept)
    assert result.mode is RunMode.REBUILD
    assert _types(spec.target)["qty"] == "long"
    assert rows(spark, spec.target) == [(1, 11), (2, 20), (3, 30)]

    # Fix 2: take bronze's type: move silver away, then `cdf-platform rebuild people` (the
    # command runs exactly this).
    shutil.move(spec.target, str(lake / "silver_before_int"))
    rebuilt = PipelineRunner.on(control, lambda: spark).run(spec, force_rebuild=True)
    assert rebuilt.mode is RunMode.REBUILD
    assert _types(spec.target)["qty"] == "integer"
    assert rows(spark, spec.target) == [(1, 11), (2, 20), (3, 30)]
