"""The small steps of an incremental run without generated code, and silver's state built before
its MERGE."""

from __future__ import annotations

from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.runner import run_pipeline
from cdf_platform.spark.small_steps import (
    CODEGEN_OFF,
    ENABLED_CONF,
    interpreted,
    load_table_state,
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
    # The file count Delta's state gives is the log's, as `deltalake` reads it without Spark.
    assert load_table_state(spark, table) == len(DeltaTable(table).file_uris()) >= 2


def test_an_incremental_run_leaves_the_sessions_code_generation_as_it_was(
    spark: SparkSession, lake: Path
) -> None:
    session = _codegen_on(spark)
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(session, spec.source, [(1, "a", 10), (2, "b", 20), (3, "c", 30)])
    run_pipeline(spec, spark_factory=lambda: session, control=control)
    sql(session, spec.source, "UPDATE {t} SET amount = 21 WHERE id = 2")
    sql(session, spec.source, "DELETE FROM {t} WHERE id = 3")

    result = run_pipeline(spec, spark_factory=lambda: session, control=control)

    assert result.mode.value == "incremental" and result.watermark_after == 3
    assert {"read", "silver_state", "key_filter", "merge"} <= set(result.timings)
    assert rows(session, spec.target) == [(1, "a", 10), (2, "b", 21)]
    assert _settings(session) == CODEGEN_ON
