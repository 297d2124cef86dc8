"""Pipeline runs end to end on real Spark and Delta: initial load, incremental MERGE, deletes,
collapse rules, data errors, no-op without a JVM, and the atomic watermark."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import DataQualityError, InvalidPipelineSpec
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.bronze import control_for, insert, make_bronze, rows, spec_for, sql


def _no_spark() -> SparkSession:
    raise AssertionError("this run must not start Spark")


def _latest_version(path: str) -> int:
    return int(DeltaTable(path).version())


def test_initial_load_then_incremental_upserts_and_hard_deletes(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])

    first = PipelineRunner.on(control, lambda: spark).run(spec)
    assert first.mode is RunMode.INITIAL_LOAD
    assert (first.watermark_before, first.watermark_after) == (None, 1)
    assert first.rows_inserted == 3
    assert rows(spark, spec.target) == rows(spark, spec.source)

    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    insert(spark, spec.source, [(4, "dee", 40)])
    second = PipelineRunner.on(control, lambda: spark).run(spec)
    assert second.mode is RunMode.INCREMENTAL
    assert (second.start_version, second.end_version, second.watermark_after) == (2, 4, 4)
    assert (second.rows_inserted, second.rows_updated, second.rows_deleted) == (1, 1, 1)
    assert rows(spark, spec.target) == [(1, "ada", 11), (3, "cy", 30), (4, "dee", 40)]
    assert rows(spark, spec.target, "id", "_source_commit_version") == [(1, 2), (3, 1), (4, 4)]
    assert read_silver_state(spec.target, spec.id).watermark == 4

    state = control.read_states()[spec.id]
    assert state["last_commit_version"] == 4
    log = control.read_log(spec.id)
    assert [r["mode"] for r in log] == ["initial_load", "incremental"]
    # Every stage of the incremental run is marked, in order, in its row and its result; a
    # run of the command line has no orchestrator's marks.
    marks = ("started_at", "planned_at", "read_at", "committed_at", "finished_at")
    assert None not in [log[1][mark] for mark in marks]
    assert [log[1][mark] for mark in marks] == sorted(log[1][mark] for mark in marks)
    assert (log[1]["created_at"], log[1]["dequeued_at"], log[1]["launched_at"]) == (None,) * 3
    assert second.stages is not None and second.stages.committed_at == log[1]["committed_at"]
    seconds = second.stages.seconds()
    assert (seconds["queue"], seconds["launch"]) == (None, None)
    assert all(seconds[stage] >= 0 for stage in ("plan", "read", "merge", "end"))
    # A snapshot read is part of its write: the initial load marks its commit, not a read.
    assert (log[0]["read_at"], log[0]["committed_at"] is not None) == (None, True)

    third = PipelineRunner.on(control, _no_spark).run(spec)
    assert third.mode is RunMode.NOOP
    assert not third.spark_started
    assert third.watermark_after == 4
    # A no-op reads no change set and commits nothing.
    assert third.stages is not None and third.stages.planned_at is not None
    assert (third.stages.read_at, third.stages.committed_at) == (None, None)


def test_soft_delete_marks_rows_and_reinsert_revives_them(spark: SparkSession, lake: Path) -> None:
    spec = spec_for(lake, delete_mode="soft")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    PipelineRunner.on(control, lambda: spark).run(spec)

    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    deleted = PipelineRunner.on(control, lambda: spark).run(spec)
    assert (deleted.rows_inserted, deleted.rows_updated, deleted.rows_deleted) == (0, 0, 1)
    delete_ts = (
        spark.sql(f"DESCRIBE HISTORY delta.`{spec.source}`")
        .filter("version = 2")
        .collect()[0]["timestamp"]
    )
    assert rows(spark, spec.target, "id", "_is_deleted", "_deleted_at") == [
        (1, False, None),
        (2, True, delete_ts),
    ]

    insert(spark, spec.source, [(2, "bob", 21)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    assert rows(spark, spec.target, "id", "amount", "_is_deleted", "_deleted_at") == [
        (1, 10, False, None),
        (2, 21, False, None),
    ]


def test_latest_change_per_key_wins_inside_one_range(spark: SparkSession, lake: Path) -> None:
    """Several updates of one key, delete-then-reinsert of another, and an overwrite that writes a
    delete and an insert of one key in the same commit, all in one range."""
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    PipelineRunner.on(control, lambda: spark).run(spec)

    for amount in (11, 12, 13):
        sql(spark, spec.source, f"UPDATE {{t}} SET amount = {amount} WHERE id = 1")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    insert(spark, spec.source, [(2, "bob-again", 22)])
    # replaceWhere rewrites id = 3 as a delete + insert in one commit; the row exists after it.
    spark.createDataFrame([(3, "cy", 33)], "id BIGINT, name STRING, amount INT").write.format(
        "delta"
    ).mode("overwrite").option("replaceWhere", "id = 3").save(spec.source)

    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.mode is RunMode.INCREMENTAL
    assert rows(spark, spec.target) == [(1, "ada", 13), (2, "bob-again", 22), (3, "cy", 33)]
    assert rows(spark, spec.target) == rows(spark, spec.source)


def test_insert_then_delete_inside_the_range_still_advances_the_watermark(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    insert(spark, spec.source, [(9, "ghost", 0)])
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 9")

    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.watermark_after == _latest_version(spec.source) == 3
    assert read_silver_state(spec.target, spec.id).watermark == 3
    assert rows(spark, spec.target) == [(1, "ada", 10)]


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([(None, "nobody", 1)], r"null key \(id=None\)"),
        ([(5, "twin-a", 1), (5, "twin-b", 2)], r"2 rows for key \(id=5\)"),
    ],
    ids=["null-key", "duplicate-key"],
)
def test_bad_keys_in_one_commit_raise_a_data_error_naming_key_and_version(
    spark: SparkSession, lake: Path, batch: list[tuple[object, ...]], message: str
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    silver_version = _latest_version(spec.target)
    insert(spark, spec.source, batch)

    with pytest.raises(DataQualityError, match=message) as caught:
        PipelineRunner.on(control, lambda: spark).run(spec)
    assert caught.value.version == 2
    assert "What to do" in str(caught.value)
    assert _latest_version(spec.target) == silver_version
    assert read_silver_state(spec.target, spec.id).watermark == 1
    assert control.read_log(spec.id)[-1]["incident_code"] == "DATA_QUALITY"


def test_key_missing_from_the_source_is_a_spec_error(spark: SparkSession, lake: Path) -> None:
    spec = spec_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    with pytest.raises(InvalidPipelineSpec, match="customer_id"):
        PipelineRunner.on(control_for(lake), lambda: spark).run(
            spec.model_copy(update={"keys": ["customer_id"]})
        )
    assert not (lake / "silver").exists()
