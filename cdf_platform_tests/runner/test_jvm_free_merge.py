"""A small SCD1 or SCD2 change set reaches silver without Spark (deltalake's change-feed read
and MERGE, the watermark in the same commit), exactly as the Spark path would write it: the
same silver rows (SCD2: the same versions, to the millisecond of their dates), the same change
feed of silver, the same load-log counts, the same refusals; any run it does not apply exactly
goes to Spark."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV as MAX_ROWS_ENV
from cdf_platform.core.errors import DataQualityError, RuntimeEnvironmentError
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.runtime.small_steps import COPY_ON_WRITE_CONF
from cdf_platform_testkit.spark_conf import SessionsWithConf
from cdf_platform_tests.bronze import (
    control_for,
    insert,
    make_bronze,
    rows,
    spark_rows,
    spec_for,
    sql,
)


def _no_spark() -> SparkSession:
    raise AssertionError("this run must not start Spark")


def _changes(spark: SparkSession, path: str, since: int) -> list[tuple[Any, ...]]:
    """Silver's change feed after version `since`, as sorted (id, type, name, amount,
    source version) rows, whoever wrote it."""
    frame = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", since + 1)
        .load(path)
    )
    return sorted(
        (r["id"], r["_change_type"], r["name"], r["amount"], r["_source_commit_version"])
        for r in frame.collect()
    )


def _history(spark: SparkSession, path: str) -> None:
    """Bronze commits of every kind a change set holds: inserts, updates, deletes, a key
    updated (its old key left), a key deleted and inserted again, several in one run."""
    insert(spark, path, [(4, "dee", 40), (5, "eve", 50)])
    sql(spark, path, "UPDATE {t} SET amount = amount + 1 WHERE id IN (1, 4)")
    sql(spark, path, "DELETE FROM {t} WHERE id = 2")
    sql(spark, path, "UPDATE {t} SET id = 30 WHERE id = 3")  # key 3 leaves, 30 arrives
    insert(spark, path, [(2, "bob again", 21)])


@pytest.mark.parametrize("jvm_free", [True, False])
def test_small_scd1_change_sets_reach_silver_without_spark_as_spark_writes_them(
    spark: SparkSession, lake: Path, jvm_free: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bronze history applied run by run, once with the JVM-free path and once with
    Spark's (`CDF_JVM_FREE_MERGE_MAX_ROWS=0`): silver's rows, silver's change feed and each
    run's counts are the same; the JVM-free runs never start Spark."""
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    PipelineRunner.on(control, lambda: spark).run(spec)  # the initial load: Spark
    loaded = int(DeltaTable(spec.target).version())
    if not jvm_free:
        monkeypatch.setenv(MAX_ROWS_ENV, "0")
    factory = _no_spark if jvm_free else (lambda: spark)
    _history(spark, spec.source)
    first = PipelineRunner.on(control, factory).run(spec)
    insert(spark, spec.source, [(6, "fay", 60)])
    sql(spark, spec.source, "UPDATE {t} SET name = 'ADA' WHERE id = 1")
    second = PipelineRunner.on(control, factory).run(spec)

    assert (first.mode, second.mode) == (RunMode.INCREMENTAL, RunMode.INCREMENTAL)
    assert (first.spark_started, second.spark_started) == (not jvm_free, not jvm_free)
    latest = int(DeltaTable(spec.source).version())
    assert second.watermark_after == latest
    assert DeltaTable(spec.target).transaction_version(spec.id) == latest
    # Silver as Spark reads it.
    assert spark_rows(spark, spec.target) == rows(spark, spec.source)
    # Versions: 1 the seed, 2 inserts, 3 updates, 4 a delete, 5 a key updated, 6 key 2 again;
    # then 7 an insert and 8 an update.
    assert spark_rows(spark, spec.target, "id", "_source_commit_version") == [
        (1, 8),
        (2, 6),
        (4, 3),
        (5, 2),
        (6, 7),
        (30, 5),
    ]
    counts = [(r.rows_inserted, r.rows_updated, r.rows_deleted) for r in (first, second)]
    assert counts == [(3, 2, 1), (1, 1, 0)]
    assert _changes(spark, spec.target, loaded) == [
        (1, "update_postimage", "ADA", 11, 8),
        (1, "update_postimage", "ada", 11, 3),
        (1, "update_preimage", "ada", 10, 1),
        (1, "update_preimage", "ada", 11, 3),
        (2, "update_postimage", "bob again", 21, 6),
        (2, "update_preimage", "bob", 20, 1),
        (3, "delete", "cy", 30, 1),
        (4, "insert", "dee", 41, 3),
        (5, "insert", "eve", 50, 2),
        (6, "insert", "fay", 60, 7),
        (30, "insert", "cy", 30, 5),
    ]
    assert [row["rows_inserted"] for row in control.read_log(spec.id)[-2:]] == [3, 1]


def test_a_duplicate_key_in_one_commit_is_refused_as_the_spark_path_refuses_it(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    insert(spark, spec.source, [(7, "x", 1), (7, "y", 2)])

    with pytest.raises(DataQualityError, match=r"bronze commit 2 holds 2 rows for key \(id=7\)"):
        PipelineRunner.on(control, _no_spark).run(spec)
    assert rows(spark, spec.target) == [(1, "ada", 10)]


def test_a_where_sends_the_run_to_spark(spark: SparkSession, lake: Path) -> None:
    spec = spec_for(lake, where="amount > 0")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    insert(spark, spec.source, [(3, "cy", 30), (4, "dee", -1)])

    ran = PipelineRunner.on(control, lambda: spark).run(spec)

    assert (ran.mode, ran.spark_started) == (RunMode.INCREMENTAL, True)
    assert rows(spark, spec.target) == [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)]


def test_a_new_bronze_column_goes_to_spark_and_the_runs_after_it_do_not(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "ALTER TABLE {t} ADD COLUMN (city STRING)")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (2, 'bob', 20, 'oslo')")

    evolved = PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "INSERT INTO {t} VALUES (3, 'cy', 30, 'rome')")
    after = PipelineRunner.on(control, _no_spark).run(spec)

    assert (evolved.spark_started, after.spark_started) == (True, False)
    assert spark_rows(spark, spec.target) == rows(spark, spec.source)


def test_a_silver_holding_deletion_vectors_goes_to_spark(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deltalake's MERGE is not trusted with a file a deletion vector covers."""
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(n, f"n{n}", n) for n in range(1, 41)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    # Spark's MERGE writes a vector when a small silver's copy is switched off.
    monkeypatch.setenv(MAX_ROWS_ENV, "0")
    sql(spark, spec.source, "UPDATE {t} SET amount = 0 WHERE id = 1")
    keeping = SessionsWithConf(spark, {COPY_ON_WRITE_CONF: "0"})
    PipelineRunner.on(control, lambda: keeping).run(spec)
    assert any(batch.num_rows for batch in DeltaTable(spec.target).deletion_vectors())
    monkeypatch.delenv(MAX_ROWS_ENV)
    sql(spark, spec.source, "UPDATE {t} SET amount = -1 WHERE id = 2")

    ran = PipelineRunner.on(control, lambda: spark).run(spec)

    assert rows(spark, spec.target) == rows(spark, spec.source)
    assert ran.spark_started


def test_a_limit_that_is_not_a_number_fails_the_run_by_name_and_writes_nothing(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    insert(spark, spec.source, [(2, "bob", 20)])
    silver_version = DeltaTable(spec.target).version()
    monkeypatch.setenv(MAX_ROWS_ENV, "20k")

    with pytest.raises(RuntimeEnvironmentError, match="CDF_JVM_FREE_MERGE_MAX_ROWS='20k'"):
        PipelineRunner.on(control, _no_spark).run(spec)
    assert DeltaTable(spec.target).version() == silver_version


def _versions(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    """An SCD2 silver's versions: (id, name, amount, opening version, start, end), sorted."""
    frame = spark.read.format("delta").load(path)
    columns = ["id", "name", "amount", "_source_commit_version", "__start_at", "__end_at"]
    return sorted((tuple(r) for r in frame.select(*columns).collect()), key=repr)


def _commit_file(path: str, version: int) -> Path:
    return Path(path) / "_delta_log" / f"{version:020d}.json"


def test_small_scd2_change_sets_reach_silver_without_spark_as_spark_writes_them(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two SCD2 pipelines of one bronze, `amount` updated in place: one applied by the
    JVM-free path, one by Spark's (`CDF_JVM_FREE_MERGE_MAX_ROWS=0`), run by run. Their
    versions are the same, to the opening version and the millisecond of `__start_at` and
    `__end_at` (Spark's commit times: commit files' modification times, monotonized), and so
    are each run's counts; the JVM-free runs never start Spark."""
    scd2 = {"history": "scd2", "track_history_except_columns": ["amount"]}
    ours = spec_for(lake, target=str(lake / "silver_ours"), **scd2)
    theirs = spec_for(lake, id="people_spark", target=str(lake / "silver_spark"), **scd2)
    control = control_for(lake)
    make_bronze(spark, ours.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    for spec in (ours, theirs):
        PipelineRunner.on(control, lambda: spark).run(spec)  # the initial loads: Spark

    def both() -> list[tuple[Any, ...]]:
        ran = PipelineRunner.on(control, _no_spark).run(ours)
        monkeypatch.setenv(MAX_ROWS_ENV, "0")
        spark_ran = PipelineRunner.on(control, lambda: spark).run(theirs)
        monkeypatch.delenv(MAX_ROWS_ENV)
        assert (ran.mode, spark_ran.mode) == (RunMode.INCREMENTAL, RunMode.INCREMENTAL)
        assert (ran.spark_started, spark_ran.spark_started) == (False, True)
        assert ran.watermark_after == spark_ran.watermark_after
        return [(r.rows_inserted, r.rows_updated, r.rows_deleted) for r in (ran, spark_ran)]

    _history(spark, ours.source)  # versions 2-6
    sql(spark, ours.source, "UPDATE {t} SET amount = 0 WHERE id = 5")  # 7: in place
    # Commit 6's file dated a second before commit 5's: Spark dates it 1 ms after commit 5.
    five = _commit_file(ours.source, 5).stat().st_mtime_ns
    os.utime(_commit_file(ours.source, 6), ns=(five - 10**9, five - 10**9))
    first = both()
    insert(spark, ours.source, [(6, "fay", 60)])
    sql(spark, ours.source, "UPDATE {t} SET name = 'ADA' WHERE id = 1")
    sql(spark, ours.source, "DELETE FROM {t} WHERE id = 6")
    sql(spark, ours.source, "UPDATE {t} SET amount = amount * 2, name = 'Bob' WHERE id = 2")
    second = both()

    assert first[0] == first[1] and second[0] == second[1]
    versions = _versions(spark, ours.target)
    assert versions == _versions(spark, theirs.target)
    # Each key's versions, oldest first: (name, amount, opening version), start, end.
    by_key: dict[int, list[tuple[Any, ...]]] = {}
    for key, name, amount, opened, start, end in sorted(versions, key=lambda row: row[3]):
        by_key.setdefault(key, []).append(((name, amount, opened), start, end))
    assert [v[0] for v in by_key[1]] == [("ada", 11, 1), ("ADA", 11, 9)]
    assert [v[0] for v in by_key[5]] == [("eve", 0, 2)]  # commit 7 updated it in place
    (fay,) = by_key[6]
    assert fay[0] == ("fay", 60, 8) and fay[2] is not None  # inserted, then deleted: closed
    assert [v[0] for v in by_key[2]] == [("bob", 20, 1), ("bob again", 21, 6), ("Bob", 42, 11)]
    # Key 30 opened at commit 5, key 2 again at the antedated commit 6: 1 ms later.
    (thirty,) = by_key[30]
    again = next(v for v in by_key[2] if v[0][2] == 6)
    assert again[1] == thirty[1] + timedelta(milliseconds=1)
