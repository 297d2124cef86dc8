"""`sequence_by` and `ignore_null_updates` on real Spark and Delta: hand-checked silver after
out-of-order and partial updates, within one run's range and across runs, and the same silver
after a rebuild over it."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import DataQualityError
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import sql_path
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import control_for, make_bronze, rows, sql


def _run(
    spark: SparkSession, spec: PipelineSpec, control: ControlTable, *, rebuild: bool = False
) -> None:
    PipelineRunner.on(control, lambda: spark).run(spec, force_rebuild=rebuild)


def test_sequence_by_keeps_the_newest_business_version(spark: SparkSession, lake: Path) -> None:
    bronze, control = str(lake / "bronze"), control_for(lake)
    spark.sql(
        f"CREATE TABLE {sql_path(bronze)} (id BIGINT, name STRING, seq INT) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    sql(spark, bronze, "INSERT INTO {t} VALUES (1, 'a', 1), (2, 'b', 1), (3, 'c', 1)")
    spec = PipelineSpec(
        id="people", source=bronze, target=str(lake / "silver"), keys=["id"], sequence_by="seq"
    )
    _run(spark, spec, control)
    # In one run's range: sequence 3, then an older sequence 2 written later.
    sql(spark, bronze, "UPDATE {t} SET name = 'a3', seq = 3 WHERE id = 1")
    sql(spark, bronze, "UPDATE {t} SET name = 'a2 late', seq = 2 WHERE id = 1")
    sql(spark, bronze, "UPDATE {t} SET name = 'b5', seq = 5 WHERE id = 2")
    _run(spark, spec, control)
    assert rows(spark, spec.target) == [(1, "a3", 3), (2, "b5", 5), (3, "c", 1)]
    # Across runs: an older sequence for id 2 arrives after silver has 5; id 3 is deleted (its
    # delete carries the row's own sequence, and the later commit breaks the tie).
    sql(spark, bronze, "UPDATE {t} SET name = 'b4 late', seq = 4 WHERE id = 2")
    sql(spark, bronze, "DELETE FROM {t} WHERE id = 3")
    _run(spark, spec, control)
    expected = [(1, "a3", 3), (2, "b5", 5)]
    assert rows(spark, spec.target) == expected
    # A rebuild over that silver keeps what the incremental runs kept. One into an empty silver
    # (the documented difference) only has bronze, which holds the late writes.
    _run(spark, spec, control, rebuild=True)
    assert rows(spark, spec.target) == expected
    fresh = spec.model_copy(update={"id": "fresh", "target": str(lake / "fresh")})
    _run(spark, fresh, control)
    assert rows(spark, fresh.target) == [(1, "a2 late", 2), (2, "b4 late", 4)]

    sql(spark, bronze, "INSERT INTO {t} VALUES (4, 'd', NULL)")
    with pytest.raises(DataQualityError, match=r"NULL sequence_by value \(seq\) for key \(id=4\)"):
        _run(spark, spec, control)
    assert rows(spark, spec.target) == expected


def test_ignore_null_updates_keeps_silver_values(spark: SparkSession, lake: Path) -> None:
    control = control_for(lake)
    spec = PipelineSpec(
        id="people",
        source=str(lake / "bronze"),
        target=str(lake / "silver"),
        keys=["id"],
        ignore_null_updates=True,
    )
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])
    _run(spark, spec, control)
    sql(spark, spec.source, "UPDATE {t} SET name = NULL WHERE id = 1")
    _run(spark, spec, control)
    assert rows(spark, spec.target) == [(1, "ada", 10), (2, "bob", 20)]
    # In one range: two partial updates of id 1; id 2 deleted and inserted again with a NULL
    # (an insert's NULL stands); a new key with a NULL.
    sql(spark, spec.source, "UPDATE {t} SET amount = NULL, name = 'ada2' WHERE id = 1")
    sql(spark, spec.source, "UPDATE {t} SET name = NULL WHERE id = 1")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (2, NULL, 25), (3, NULL, 30)")
    _run(spark, spec, control)
    expected = [(1, "ada2", 10), (2, None, 25), (3, None, 30)]
    assert rows(spark, spec.target) == expected
    _run(spark, spec, control, rebuild=True)
    assert rows(spark, spec.target) == expected
    # Into an empty silver a rebuild has only bronze's NULLs (the documented difference).
    fresh = spec.model_copy(update={"id": "fresh", "target": str(lake / "fresh")})
    _run(spark, fresh, control)
    assert rows(spark, fresh.target) == [(1, None, None), (2, None, 25), (3, None, 30)]
