"""`history: scd2` on real Spark and Delta: a hand-checked history of versions (tracked changes
open one, untracked ones update the open one in place, deletes close it), the same history
whether bronze's commits were applied one run each or a few at a time, and what a rebuild adds
to it (the documented difference: changes dated at the snapshot's version)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import control_for, make_bronze, spec_for, sql

# Bronze commits 2..8 (version 1 seeds ada and bob).
HISTORY = [
    "UPDATE {t} SET amount = 11 WHERE id = 1",  # untracked: ada's version changes in place
    "UPDATE {t} SET name = 'ada2' WHERE id = 1",  # tracked: a new version
    "DELETE FROM {t} WHERE id = 2",  # closes bob
    "INSERT INTO {t} VALUES (3, 'cy', 30)",
    "UPDATE {t} SET name = 'ada3', amount = 12 WHERE id = 1",
    "INSERT INTO {t} VALUES (2, 'bob2', 21)",  # bob is back: a new version
    "UPDATE {t} SET amount = 13 WHERE id = 1",  # in place on ada3
]
# (id, name, amount, opened at version, closed at version)
EXPECTED = [
    (1, "ada", 11, 1, 3),
    (1, "ada2", 11, 3, 6),
    (1, "ada3", 13, 6, None),
    (2, "bob", 20, 1, 4),
    (2, "bob2", 21, 7, None),
    (3, "cy", 30, 5, None),
]


def _spec(lake: Path, name: str) -> PipelineSpec:
    scd2 = {"history": "scd2", "track_history_columns": ["name"]}
    return spec_for(lake, id=name, target=str(lake / name), **scd2)


def _run(spark: SparkSession, spec: PipelineSpec, control: ControlTable, **kwargs: Any) -> RunMode:
    return PipelineRunner.on(control, lambda: spark).run(spec, **kwargs).mode


def _commit_times(spark: SparkSession, path: str) -> dict[datetime, int]:
    """Bronze's commit timestamps (as its change feed gives them) -> version."""
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(path)
    )
    found = feed.select("_commit_timestamp", "_commit_version").distinct().collect()
    return {row[0]: int(row[1]) for row in found}


def _versions(spark: SparkSession, path: str, times: dict[datetime, int]) -> list[tuple[Any, ...]]:
    """Silver's rows as (id, name, amount, opened at version, closed at version), checking that
    each opening version is the one `_source_commit_version` records."""
    found = []
    for row in spark.read.format("delta").load(path).collect():
        opened = times[row["__start_at"]]
        assert opened == row["_source_commit_version"], row
        closed = times[row["__end_at"]] if row["__end_at"] is not None else None
        found.append((row["id"], row["name"], row["amount"], opened, closed))
    return sorted(found, key=repr)


def test_history_is_the_same_one_commit_per_run_or_several(spark: SparkSession, lake: Path) -> None:
    control = control_for(lake)
    bronze = str(lake / "bronze")
    make_bronze(spark, bronze, [(1, "ada", 10), (2, "bob", 20)])
    stepwise, batched = _spec(lake, "stepwise"), _spec(lake, "batched")
    assert _run(spark, stepwise, control) is RunMode.INITIAL_LOAD
    assert _run(spark, batched, control) is RunMode.INITIAL_LOAD
    # The two consumers split the same commits into different runs.
    for version, statement in enumerate(HISTORY, start=2):
        sql(spark, bronze, statement)
        if version in (3, 6, 8):
            assert _run(spark, stepwise, control) is RunMode.INCREMENTAL
        if version in (4, 8):
            assert _run(spark, batched, control) is RunMode.INCREMENTAL
    times = _commit_times(spark, bronze)
    assert _versions(spark, stepwise.target, times) == sorted(EXPECTED, key=repr)
    assert _versions(spark, batched.target, times) == sorted(EXPECTED, key=repr)

    # A rebuild knows bronze at version 10 only: cy's rename (9) and ada's delete (10) are both
    # dated at 10 in its history, where the incremental runs date the rename at 9.
    sql(spark, bronze, "UPDATE {t} SET name = 'cy2' WHERE id = 3")
    sql(spark, bronze, "DELETE FROM {t} WHERE id = 1")
    assert _run(spark, batched, control, force_rebuild=True) is RunMode.REBUILD
    assert _run(spark, stepwise, control) is RunMode.INCREMENTAL
    times = _commit_times(spark, bronze)
    unchanged = [(1, "ada", 11, 1, 3), (1, "ada2", 11, 3, 6), (2, "bob", 20, 1, 4)]
    unchanged += [(1, "ada3", 13, 6, 10), (2, "bob2", 21, 7, None)]
    assert _versions(spark, batched.target, times) == sorted(
        [*unchanged, (3, "cy", 30, 5, 10), (3, "cy2", 30, 10, None)], key=repr
    )
    assert _versions(spark, stepwise.target, times) == sorted(
        [*unchanged, (3, "cy", 30, 5, 9), (3, "cy2", 30, 9, None)], key=repr
    )
    message = control.read_log("batched")[-1]["message"]
    assert "scd2 rebuild at version 10" in message and "not in the history" in message


# Bronze commits 2..5 (version 1 seeds ada and bob) under `ignore_null_updates`.
NULL_HISTORY = [
    "UPDATE {t} SET name = NULL, amount = 11 WHERE id = 1",  # name kept: (ada, 11) opens
    "UPDATE {t} SET amount = NULL WHERE id = 1",  # all kept: no change, no version
    "DELETE FROM {t} WHERE id = 2",  # closes bob
    "INSERT INTO {t} VALUES (2, NULL, 22)",  # an insert's NULLs stand
]
NULL_EXPECTED = sorted(
    [(1, "ada", 10, 1, 2), (1, "ada", 11, 2, None), (2, "bob", 20, 1, 4), (2, None, 22, 5, None)],
    key=repr,
)


def test_scd2_with_ignore_null_updates_opens_no_version_for_a_null(
    spark: SparkSession, lake: Path
) -> None:
    """A NULL update keeps the open version's value, so it changes nothing tracked: the
    history is the same however the commits are split into runs, and a rebuild over a snapshot
    holding those NULLs opens no version either."""
    control = control_for(lake)
    bronze = str(lake / "bronze")
    make_bronze(spark, bronze, [(1, "ada", 10), (2, "bob", 20)])
    specs = [
        spec_for(lake, id=name, target=str(lake / name), history="scd2", ignore_null_updates=True)
        for name in ("stepwise", "batched")
    ]
    for spec in specs:
        assert _run(spark, spec, control) is RunMode.INITIAL_LOAD
    # The stepwise consumer runs after commits 2-3 and 4-5; the batched one once, after all.
    for version, statement in enumerate(NULL_HISTORY, start=2):
        sql(spark, bronze, statement)
        if version in (3, 5):
            assert _run(spark, specs[0], control) is RunMode.INCREMENTAL
    assert _run(spark, specs[1], control) is RunMode.INCREMENTAL
    times = _commit_times(spark, bronze)
    for spec in specs:
        assert _versions(spark, spec.target, times) == NULL_EXPECTED
    # Both silvers now hold the same rows on every column (`_versions` reads them all) at the
    # same watermark, under specs that differ in id alone: one rebuild stands for either.
    assert _run(spark, specs[0], control, force_rebuild=True) is RunMode.REBUILD
    assert _versions(spark, specs[0].target, times) == NULL_EXPECTED


def test_track_history_except_columns_tracks_every_other_value_column(
    spark: SparkSession, lake: Path
) -> None:
    """`track_history_except_columns: [amount]` is `track_history_columns: [name]` here: the
    same history of versions (amount changes in place, name changes open versions)."""
    control = control_for(lake)
    bronze = str(lake / "bronze")
    make_bronze(spark, bronze, [(1, "ada", 10), (2, "bob", 20)])
    spec = spec_for(
        lake,
        id="excepted",
        target=str(lake / "excepted"),
        history="scd2",
        track_history_except_columns=["amount"],
    )
    assert _run(spark, spec, control) is RunMode.INITIAL_LOAD
    for version, statement in enumerate(HISTORY, start=2):
        sql(spark, bronze, statement)
        if version in (3, 8):
            assert _run(spark, spec, control) is RunMode.INCREMENTAL
    assert _versions(spark, spec.target, _commit_times(spark, bronze)) == sorted(EXPECTED, key=repr)
