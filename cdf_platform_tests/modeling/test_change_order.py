"""`sequence_by` and `ignore_null_updates` on real Spark and Delta: hand-checked silver after
out-of-order and partial updates, within one run's range and across runs, and the same silver
after a rebuild over it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import DataQualityError
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import (
    Delete,
    Insert,
    Update,
    control_for,
    deltalake_bronze,
    deltalake_commit,
    rows,
)

# Bronze is written by deltalake: these histories are about the platform's Spark path (where
# `sequence_by` and `ignore_null_updates` keep every run), and bronze's writer is not under test.


def _run(
    spark: SparkSession, spec: PipelineSpec, control: ControlTable, *, rebuild: bool = False
) -> None:
    PipelineRunner.on(control, lambda: spark).run(spec, force_rebuild=rebuild)


def test_sequence_by_keeps_the_newest_business_version(spark: SparkSession, lake: Path) -> None:
    bronze, control = str(lake / "bronze"), control_for(lake)
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("seq", pa.int32())])
    deltalake_bronze(bronze, [(1, "a", 1), (2, "b", 1), (3, "c", 1)], schema)
    spec = PipelineSpec(
        id="people", source=bronze, target=str(lake / "silver"), keys=["id"], sequence_by="seq"
    )
    _run(spark, spec, control)
    # In one run's range: sequence 3, then an older sequence 2 written later.
    deltalake_commit(bronze, Update("id = 1", name="a3", seq=3))
    deltalake_commit(bronze, Update("id = 1", name="a2 late", seq=2))
    deltalake_commit(bronze, Update("id = 2", name="b5", seq=5))
    _run(spark, spec, control)
    assert rows(spark, spec.target) == [(1, "a3", 3), (2, "b5", 5), (3, "c", 1)]
    # Across runs: an older sequence for id 2 arrives after silver has 5; id 3 is deleted (its
    # delete carries the row's own sequence, and the later commit breaks the tie).
    deltalake_commit(bronze, Update("id = 2", name="b4 late", seq=4))
    deltalake_commit(bronze, Delete("id = 3"))
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

    deltalake_commit(bronze, Insert((4, "d", None)))
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
    deltalake_bronze(spec.source, [(1, "ada", 10), (2, "bob", 20)])
    _run(spark, spec, control)
    deltalake_commit(spec.source, Update("id = 1", name=None))
    _run(spark, spec, control)
    assert rows(spark, spec.target) == [(1, "ada", 10), (2, "bob", 20)]
    # In one range: two partial updates of id 1; id 2 deleted and inserted again with a NULL
    # (an insert's NULL stands); a new key with a NULL.
    deltalake_commit(spec.source, Update("id = 1", amount=None, name="ada2"))
    deltalake_commit(spec.source, Update("id = 1", name=None))
    deltalake_commit(spec.source, Delete("id = 2"))
    deltalake_commit(spec.source, Insert((2, None, 25), (3, None, 30)))
    _run(spark, spec, control)
    expected = [(1, "ada2", 10), (2, None, 25), (3, None, 30)]
    assert rows(spark, spec.target) == expected
    _run(spark, spec, control, rebuild=True)
    assert rows(spark, spec.target) == expected
    # Into an empty silver a rebuild has only bronze's NULLs (the documented difference).
    fresh = spec.model_copy(update={"id": "fresh", "target": str(lake / "fresh")})
    _run(spark, fresh, control)
    assert rows(spark, fresh.target) == [(1, None, None), (2, None, 25), (3, None, 30)]
