"""`history: scd2` with `sequence_by` on real Spark and Delta: versions ordered and dated by the
business column, with late changes (older sequence values in later commits) placed where they
belong in the history, even inside a version whose in-place updates came after them; the same
history however the commits were split into runs; a rebuild that adds nothing it already knows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import SpecChangeRefused
from cdf_platform.core.sql import sql_path
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform_tests.bronze import (
    BronzeWrite,
    Delete,
    Update,
    control_for,
    deltalake_bronze,
    deltalake_commit,
    drop_column,
    spec_for,
    sql,
)

# Bronze commits 2..8 (version 1 seeds ada and bob at seq 10); only `name` is tracked.
HISTORY: list[BronzeWrite] = [
    Update("id = 1", name="ada3", seq=30),
    Update("id = 1", name="ada2", seq=20),  # late: lands between 10 and 30
    Update("id = 2", note="b2", seq=15),  # untracked: bob changes in place
    # Late, inside bob's version and before its in-place update at 15: splits it in three.
    Update("id = 2", name="bob2", note="late", seq=12),
    Update("id = 2", seq=40),  # bob2 again, at 40
    Delete("id = 2"),  # dated by the deleted row's seq, 40
    Update("id = 1", note=None, seq=25),  # late NULL, in place on ada2
]
# (id, name, note, __start_at, __end_at, _source_commit_version)
EXPECTED = [
    (1, "ada", "a", 10, 20, 1),
    (1, "ada2", None, 20, 30, 3),
    (1, "ada3", "a", 30, None, 2),
    (2, "bob", "b", 10, 12, 1),
    (2, "bob2", "late", 12, 15, 5),
    (2, "bob", "b2", 15, 40, 4),
    (2, "bob2", "late", 40, 40, 6),
]
# ignore_null_updates: the NULL at 25 keeps ada2's note.
EXPECTED_IGNORING_NULLS = [
    (1, "ada2", "a", 20, 30, 3) if row[:2] == (1, "ada2") else row for row in EXPECTED
]


# `_make_bronze`'s table and rows, for deltalake.
SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("note", pa.string()), ("seq", pa.int32())]
)
SEED = [(1, "ada", "a", 10), (2, "bob", "b", 10)]


def _make_bronze(spark: SparkSession, path: str) -> None:
    spark.sql(
        f"CREATE TABLE {sql_path(path)} (id BIGINT, name STRING, note STRING, seq INT) "
        "USING DELTA TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(f"INSERT INTO {sql_path(path)} VALUES (1, 'ada', 'a', 10), (2, 'bob', 'b', 10)")


def _versions(spark: SparkSession, path: str) -> list[tuple[Any, ...]]:
    columns = ["id", "name", "note", "__start_at", "__end_at", "_source_commit_version"]
    found = spark.read.format("delta").load(path).select(*columns).collect()
    return sorted((tuple(r) for r in found), key=repr)


def _run(spark: SparkSession, spec: Any, lake: Path, **kwargs: Any) -> RunMode:
    control = control_for(lake)
    return PipelineRunner.on(control, lambda: spark).run(spec, **kwargs).mode


def test_late_changes_land_in_place_however_the_runs_split_them(
    spark: SparkSession, lake: Path
) -> None:
    # Bronze is written by deltalake: the history is about the platform's Spark path (where
    # `sequence_by` keeps every run), and bronze's writer is not under test here.
    bronze = str(lake / "bronze")
    deltalake_bronze(bronze, SEED, SCHEMA)
    common = {"history": "scd2", "sequence_by": "seq", "track_history_columns": ["name"]}
    stepwise = spec_for(lake, id="stepwise", target=str(lake / "stepwise"), **common)
    batched = spec_for(
        lake, id="batched", target=str(lake / "batched"), ignore_null_updates=True, **common
    )
    for spec in (stepwise, batched):
        assert _run(spark, spec, lake) is RunMode.INITIAL_LOAD
    for version, write in enumerate(HISTORY, start=2):
        deltalake_commit(bronze, write)
        if version in (3, 5, 8):
            assert _run(spark, stepwise, lake) is RunMode.INCREMENTAL
    assert _run(spark, batched, lake) is RunMode.INCREMENTAL
    assert _versions(spark, stepwise.target) == sorted(EXPECTED, key=repr)
    assert _versions(spark, batched.target) == sorted(EXPECTED_IGNORING_NULLS, key=repr)
    # The dates are the sequence column's type; each version keeps its changes in order.
    silver = spark.read.format("delta").load(stepwise.target)
    assert dict(silver.dtypes)["__start_at"] == "int"
    bob = silver.filter("id = 2 AND __start_at = 15").select("__changes").first()
    assert bob is not None
    assert [(c["sequence"], c["version"], c["change"]) for c in bob[0]] == [(15, 4, "update")]

    # A rebuild sees bronze at 8 (ada2 at 25): nothing it does not already know.
    before = spark.sql(f"DESCRIBE HISTORY {sql_path(stepwise.target)}").count()
    assert _run(spark, stepwise, lake, force_rebuild=True) is RunMode.REBUILD
    assert _versions(spark, stepwise.target) == sorted(EXPECTED, key=repr)
    merge = spark.sql(f"DESCRIBE HISTORY {sql_path(stepwise.target)}").first()
    assert merge is not None and spark.sql(
        f"DESCRIBE HISTORY {sql_path(stepwise.target)}"
    ).count() in (before, before + 1)
    metrics = merge["operationMetrics"]
    assert int(metrics.get("numTargetRowsInserted", 0)) == 0
    assert int(metrics.get("numTargetRowsUpdated", 0)) == 0


def test_a_history_written_without_sequence_by_is_not_continued_with_it(
    spark: SparkSession, lake: Path
) -> None:
    """Its versions are dated by commit time and hold no changes to place a late one among:
    refused with the way out (move silver away and rebuild), before anything is written."""
    bronze = str(lake / "bronze")
    _make_bronze(spark, bronze)
    plain = spec_for(lake, history="scd2")
    assert _run(spark, plain, lake) is RunMode.INITIAL_LOAD
    sql(spark, bronze, "UPDATE {t} SET name = 'ada2', seq = 20 WHERE id = 1")
    sequenced = spec_for(lake, history="scd2", sequence_by="seq")
    # The spec edit is refused before any read (it changes what a version is).
    with pytest.raises(SpecChangeRefused, match="sequence_by") as raised:
        _run(spark, sequenced, lake)
    assert "cdf-platform rebuild people" in raised.value.action
    assert len(_versions(spark, plain.target)) == 2


def test_a_dropped_column_is_null_on_current_versions_and_kept_on_closed_ones(
    spark: SparkSession, lake: Path
) -> None:
    """Bronze drops `note`: the rebuild (a non-additive change) NULLs it on every current
    version, also of keys the snapshot shows unchanged, and leaves closed versions as they
    were, also the one bronze's row (a late write) still belongs to."""
    bronze = str(lake / "bronze")
    _make_bronze(spark, bronze)
    spec = spec_for(lake, history="scd2", sequence_by="seq", fallback_mode="SNAPSHOT_REBUILD")
    assert _run(spark, spec, lake) is RunMode.INITIAL_LOAD
    sql(spark, bronze, "UPDATE {t} SET name = 'ada3', seq = 30 WHERE id = 1")
    sql(spark, bronze, "UPDATE {t} SET name = 'ada2', seq = 20 WHERE id = 1")  # late
    assert _run(spark, spec, lake) is RunMode.INCREMENTAL
    drop_column(spark, bronze, "note")
    assert _run(spark, spec, lake) is RunMode.REBUILD
    assert _versions(spark, spec.target) == [
        (1, "ada", "a", 10, 20, 1),
        (1, "ada2", "a", 20, 30, 3),
        (1, "ada3", None, 30, None, 2),
        (2, "bob", None, 10, None, 1),
    ]
