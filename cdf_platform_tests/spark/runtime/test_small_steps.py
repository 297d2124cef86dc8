"""The small steps of an incremental run without generated code, silver's state built on a second
thread before its MERGE, and a small change set's run on a fixed plan."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV
from cdf_platform.core.errors import UnsafeSparkConfig
from cdf_platform.planning.plan import RunMode, plan_run
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.runtime.small_steps import (
    AHEAD_CONF,
    CODEGEN_OFF,
    COPY_ON_WRITE_CONF,
    COPY_ON_WRITE_MAX_BYTES,
    ENABLED_CONF,
    FIXED_PLAN_CONF,
    FIXED_PLAN_MAX_BYTES,
    INTERPRETED_MERGE_MAX_BYTES,
    MERGE_CONF,
    MERGE_PERSISTENT_DVS,
    PARTITION_BYTES,
    TableState,
    copy_on_write_merge,
    fixed_plan,
    interpreted,
    interpreted_merge,
    load_table_state,
    loading_table_state,
)
from cdf_platform_tests.bronze import control_for, make_bronze, rows, spec_for, sql

# What a production session has (the test session itself runs without generated code).
CODEGEN_ON = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}


def _codegen_on(spark: SparkSession) -> SparkSession:
    session = spark.newSession()
    for key, value in CODEGEN_ON.items():
        session.conf.set(key, value)
    return session


def _settings(spark: SparkSession) -> dict[str, str | None]:
    return {key: spark.conf.get(key, None) for key in CODEGEN_ON}


ADAPTIVE = "spark.sql.adaptive.enabled"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


def test_interpreted_turns_code_generation_off_for_the_block_only(spark: SparkSession) -> None:
    session = _codegen_on(spark)
    with interpreted(session):
        assert _settings(session) == CODEGEN_OFF
    assert _settings(session) == CODEGEN_ON

    session.conf.set(ENABLED_CONF, "false")
    with interpreted(session):
        assert _settings(session) == CODEGEN_ON
    assert _settings(session) == CODEGEN_ON


def test_interpreted_puts_the_settings_back_when_the_block_fails(spark: SparkSession) -> None:
    session = _codegen_on(spark)
    try:
        with interpreted(session):
            raise RuntimeError("the step failed")
    except RuntimeError:
        pass
    assert _settings(session) == CODEGEN_ON


def test_load_table_state_counts_the_tables_files(spark: SparkSession, lake: Path) -> None:
    table = str(lake / "t")
    make_bronze(spark, table, [(1, "a", 10), (2, "b", 20)])
    sql(spark, table, "INSERT INTO {t} VALUES (3, 'c', 30)")
    # The files and bytes Delta's state gives are the log's, as `deltalake` reads them.
    log = pa.table(DeltaTable(table).get_add_actions(flatten=True)).to_pydict()
    assert load_table_state(spark, table) == TableState(
        files=len(log["path"]), bytes=sum(log["size_bytes"])
    )
    assert len(log["path"]) >= 2


def test_an_incremental_run_leaves_the_sessions_code_generation_as_it_was(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JVM_FREE_MERGE_MAX_ROWS_ENV, "0")  # Spark's run, not deltalake's
    session = _codegen_on(spark)
    session.conf.set(ADAPTIVE, "true")
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(session, spec.source, [(1, "a", 10), (2, "b", 20), (3, "c", 30)])
    PipelineRunner.on(control, lambda: session).run(spec)
    sql(session, spec.source, "UPDATE {t} SET amount = 21 WHERE id = 2")
    sql(session, spec.source, "DELETE FROM {t} WHERE id = 3")

    result = PipelineRunner.on(control, lambda: session).run(spec)

    assert result.mode.value == "incremental" and result.watermark_after == 3
    assert {"read", "silver_state", "key_filter", "merge"} <= set(result.timings)
    assert rows(session, spec.target) == [(1, "a", 10), (2, "b", 21)]
    assert _settings(session) == CODEGEN_ON
    assert session.conf.get(ADAPTIVE) == "true"


def test_silver_state_is_built_on_a_second_thread_and_a_failure_left_to_the_caller(
    spark: SparkSession, lake: Path
) -> None:
    table = str(lake / "t")
    make_bronze(spark, table, [(1, "a", 10)])
    with loading_table_state(spark, table) as state:
        assert "silver-state" in {thread.name for thread in threading.enumerate()}
    assert state.loaded

    with loading_table_state(spark, str(lake / "missing")) as state:
        pass
    assert not state.loaded  # not raised here: the runner loads it again, classified

    session = spark.newSession()
    session.conf.set(AHEAD_CONF, "false")
    with loading_table_state(session, table) as state:
        assert "silver-state" not in {thread.name for thread in threading.enumerate()}
    assert not state.loaded


def test_fixed_plan_turns_adaptive_execution_off_for_a_small_change_set_only(
    spark: SparkSession,
) -> None:
    session = spark.newSession()
    session.conf.set(ADAPTIVE, "true")
    cores = session.sparkContext.defaultParallelism
    session.conf.set(SHUFFLE_PARTITIONS, str(cores + 6))
    with fixed_plan(session, 4096):
        # What adaptive execution would coalesce a small shuffle to: one partition.
        assert (session.conf.get(ADAPTIVE), session.conf.get(SHUFFLE_PARTITIONS)) == ("false", "1")
    assert (session.conf.get(ADAPTIVE), session.conf.get(SHUFFLE_PARTITIONS)) == (
        "true",
        str(cores + 6),
    )
    # One partition per PARTITION_BYTES of change files, never more than the cores.
    with fixed_plan(session, 2 * PARTITION_BYTES + 1):
        assert session.conf.get(SHUFFLE_PARTITIONS) == str(min(3, cores))
    with fixed_plan(session, FIXED_PLAN_MAX_BYTES):
        assert session.conf.get(SHUFFLE_PARTITIONS) == str(min(4, cores))
    session.conf.set(SHUFFLE_PARTITIONS, "1")
    with fixed_plan(session, FIXED_PLAN_MAX_BYTES):
        assert session.conf.get(SHUFFLE_PARTITIONS) == "1"  # fewer configured: kept
    for unknown_or_large in (None, FIXED_PLAN_MAX_BYTES + 1):
        with fixed_plan(session, unknown_or_large):
            assert session.conf.get(ADAPTIVE) == "true"

    session.conf.set(FIXED_PLAN_CONF, "0")
    with fixed_plan(session, 0):
        assert session.conf.get(ADAPTIVE) == "true"
    session.conf.set(FIXED_PLAN_CONF, "256MB")
    with pytest.raises(UnsafeSparkConfig, match=FIXED_PLAN_CONF), fixed_plan(session, 1):
        pass


def test_a_plans_change_bytes_are_the_files_its_change_feed_read_scans(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 10), (2, "b", 20), (3, "c", 30)])
    PipelineRunner.on(control_for(lake), lambda: spark).run(spec)
    assert plan_run(spec).change_bytes() is None  # caught up: no range
    data_files = set(DeltaTable(spec.source).file_uris())
    sql(spark, spec.source, "INSERT INTO {t} VALUES (4, 'd', 40)")
    inserted = set(DeltaTable(spec.source).file_uris()) - data_files
    sql(spark, spec.source, "UPDATE {t} SET amount = 21 WHERE id = 2")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 3")

    plan = plan_run(spec)

    # An insert is read from its data file; an UPDATE and a DELETE from their change files
    # (the only ones bronze has).
    change_data = lake / "bronze" / "_change_data"
    change_files = [change_data / n for n in os.listdir(change_data) if not n.startswith(".")]
    assert plan.mode is RunMode.INCREMENTAL and len(inserted) == 1 and len(change_files) == 2
    expected = sum(os.path.getsize(uri.removeprefix("file://")) for uri in inserted)
    expected += sum(os.path.getsize(path) for path in change_files)
    assert plan.change_bytes() == expected


def test_interpreted_merge_runs_interpreted_into_a_silver_up_to_the_limit_only(
    spark: SparkSession,
) -> None:
    session = _codegen_on(spark)
    with interpreted_merge(session, TableState(files=3, bytes=INTERPRETED_MERGE_MAX_BYTES)):
        assert _settings(session) == CODEGEN_OFF
    assert _settings(session) == CODEGEN_ON
    with interpreted_merge(session, TableState(files=3, bytes=INTERPRETED_MERGE_MAX_BYTES + 1)):
        assert _settings(session) == CODEGEN_ON

    session.conf.set(MERGE_CONF, "0")
    with interpreted_merge(session, TableState(files=0, bytes=0)):
        assert _settings(session) == CODEGEN_ON
    session.conf.set(MERGE_CONF, "128MB")
    with (
        pytest.raises(UnsafeSparkConfig, match=MERGE_CONF),
        interpreted_merge(session, TableState(files=1, bytes=1)),
    ):
        pass


def _merge_one_update(spark: SparkSession, path: str, key: int, value: int) -> list[dict[str, Any]]:
    """MERGE an update of `key` into the table at `path`; return its commit's add actions."""
    spark.sql(
        f"MERGE INTO delta.`{path}` t USING (SELECT {key} AS id, {value} AS v) s "
        "ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET v = s.v"
    )
    version = DeltaTable(path).version()
    log = Path(path, "_delta_log", f"{version:020d}.json").read_text(encoding="utf-8")
    actions = [json.loads(line) for line in log.splitlines() if line.strip()]
    return [action["add"] for action in actions if "add" in action]


def test_copy_on_write_merge_rewrites_files_of_a_small_silver_only(
    spark: SparkSession, tmp_path: Path
) -> None:
    path = str(tmp_path / "silver")
    spark.sql(
        f"CREATE TABLE delta.`{path}` (id BIGINT, v BIGINT) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    spark.range(10).selectExpr("id", "id * 10 AS v").coalesce(1).write.format("delta").mode(
        "append"
    ).save(path)
    session = spark.newSession()
    # Up to the limit: the touched file is rewritten whole, no deletion vector; the setting
    # gets its value back after the block.
    with copy_on_write_merge(session, TableState(files=1, bytes=COPY_ON_WRITE_MAX_BYTES)):
        assert session.conf.get(MERGE_PERSISTENT_DVS) == "false"
        adds = _merge_one_update(session, path, 1, 11)
    assert session.conf.get(MERGE_PERSISTENT_DVS, None) is None
    assert [add.get("deletionVector") for add in adds] == [None]
    assert json.loads(adds[0]["stats"])["numRecords"] == 10
    # Above it, and with the limit 0: the table's deletion vectors mark the replaced row (of
    # the ten-row file: a file whose only row is replaced is removed whole either way).
    with copy_on_write_merge(session, TableState(files=1, bytes=COPY_ON_WRITE_MAX_BYTES + 1)):
        adds = _merge_one_update(session, path, 2, 22)
    assert any(add.get("deletionVector") for add in adds), adds
    session.conf.set(COPY_ON_WRITE_CONF, "0")
    with copy_on_write_merge(session, TableState(files=0, bytes=0)):
        adds = _merge_one_update(session, path, 3, 33)
    assert any(add.get("deletionVector") for add in adds), adds
    changed = {1: 11, 2: 22, 3: 33}
    assert rows(spark, path) == [(i, changed.get(i, i * 10)) for i in range(10)]
    session.conf.set(COPY_ON_WRITE_CONF, "1MB")
    with (
        pytest.raises(UnsafeSparkConfig, match=COPY_ON_WRITE_CONF),
        copy_on_write_merge(session, TableState(files=1, bytes=1)),
    ):
        pass
