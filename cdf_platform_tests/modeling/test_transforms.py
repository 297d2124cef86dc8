"""Conforming transforms on real Spark and Delta: derived columns, a row filter whose dropped
rows become deletes, a Python transform, each giving the same silver through many incremental
runs and through one rebuild; and the transforms refused on the analysed plan before anything
is written. (Soft deletes under a filter: the generated histories of seeds 3 and 9.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import (
    BronzeWrite,
    Delete,
    Insert,
    Update,
    control_for,
    deltalake_bronze,
    deltalake_commit,
    deltalake_insert,
    rows,
    spec_for,
)

TRANSFORMS = "cdf_platform_testkit.transforms"
# Bronze is written by deltalake: every run here is on the platform's Spark path (an initial
# load, or a spec with a transform, `columns`, `where` or `sequence_by`), and bronze's writer is
# not under test.


def _pipeline(lake: Path, name: str, **fields: Any) -> PipelineSpec:
    return spec_for(lake, id=name, target=str(lake / name), **fields)


def _run(spark: SparkSession, spec: PipelineSpec, control: ControlTable) -> RunMode:
    return PipelineRunner.on(control, lambda: spark).run(spec).mode


# Bronze commits after the seed insert (version 1), in the runs that apply them.
HISTORY: list[list[BronzeWrite]] = [
    [
        Update("id = 2", amount=25),  # bob starts matching `where`
        Update("id = 1", amount=3),  # ada stops matching: a delete in silver
    ],
    [
        Update("id = 3", name="cy junior"),
        Delete("id = 3"),
        Insert((5, "eve", 50), (6, "fay", 1)),
        Update("id = 1", amount=60),  # ada is back
    ],
]
# The three steps together: the Python transform, then columns (which see its output), then
# the filter.
CONFORMED = {
    "transform": f"{TRANSFORMS}:conform_people",
    "columns": {"amount_usd": "amount * 2", "label": "concat(name, ':', band)"},
    "where": "amount >= 10",
}


def test_transforms_give_hand_checked_silver_incrementally_and_by_rebuild(
    spark: SparkSession, lake: Path
) -> None:
    control = control_for(lake)
    deltalake_bronze(str(lake / "bronze"), [(1, "ada", 10), (2, "bob", 5), (3, "cy", 30)])
    stepwise = _pipeline(lake, "stepwise", **CONFORMED)
    assert _run(spark, stepwise, control) is RunMode.INITIAL_LOAD
    assert rows(spark, stepwise.target) == [
        (1, "Ada", 10, "low", 20, "Ada:low"),
        (3, "Cy", 30, "high", 60, "Cy:high"),
    ]
    for writes in HISTORY:
        for write in writes:
            deltalake_commit(str(lake / "bronze"), write)
        assert _run(spark, stepwise, control) is RunMode.INCREMENTAL
    # ada left at version 3 and came back at 7; bob joined at 2; cy was deleted; fay never
    # matched `where`.
    assert rows(spark, stepwise.target) == [
        (1, "Ada", 60, "high", 120, "Ada:high"),
        (2, "Bob", 25, "high", 50, "Bob:high"),
        (5, "Eve", 50, "high", 100, "Eve:high"),
    ]
    # The same history by one rebuild (an initial load of the final bronze).
    rebuilt = _pipeline(lake, "rebuilt", **CONFORMED)
    assert _run(spark, rebuilt, control) is RunMode.INITIAL_LOAD
    assert rows(spark, rebuilt.target) == rows(spark, stepwise.target)


# Refusals beside those of the bad-input catalogue (aggregation, key change, rand(), unknown
# column, syntax error: cdf_platform_tests/faults/catalogue.py).
REFUSED = [
    pytest.param({"transform": f"{TRANSFORMS}:keep_rich"}, "use `where`", id="filter_in_transform"),
    pytest.param({"columns": {"seen": "current_timestamp()"}}, "current_timestamp", id="clock"),
    pytest.param({"columns": {"tags": "explode(array(name, name))"}}, "generator", id="explode"),
    pytest.param({"columns": {"x": "(SELECT max(id) FROM range(3))"}}, "subquery", id="subquery"),
    pytest.param({"columns": {"total": "sum(amount)"}}, "columns.total", id="aggregate_expression"),
    pytest.param({"where": "amount >= AND 2"}, "where", id="where_syntax_error"),
    pytest.param({"sequence_by": "updated_at"}, "sequence_by 'updated_at'", id="unknown_sequence"),
    pytest.param({"transform": f"{TRANSFORMS}:nowhere"}, "has no function", id="missing_function"),
    pytest.param(
        {"transform": f"{TRANSFORMS}:needs_a_lookup"},
        "raised KeyError",
        id="transform_raises",
    ),
]


@pytest.mark.parametrize(("fields", "named"), REFUSED)
def test_a_refused_transform_writes_nothing(
    spark: SparkSession, lake: Path, fields: dict[str, Any], named: str
) -> None:
    control = control_for(lake)
    deltalake_bronze(str(lake / "bronze"), [(1, "ada", 10)])
    spec = _pipeline(lake, "people", **fields)
    with pytest.raises(InvalidPipelineSpec, match="What to do: fix the named field") as raised:
        _run(spark, spec, control)
    assert named in str(raised.value)
    assert not Path(spec.target).exists()
    assert control.read_states().get(spec.id) is None


def test_a_refused_transform_leaves_a_loaded_silver_and_its_watermark_alone(
    spark: SparkSession, lake: Path
) -> None:
    control = control_for(lake)
    deltalake_bronze(str(lake / "bronze"), [(1, "ada", 10)])
    _run(spark, _pipeline(lake, "people"), control)
    deltalake_insert(str(lake / "bronze"), [(2, "bob", 20)])
    # The edited spec's run reconciles silver under it (FAIL_FAST would refuse the edit first,
    # `SpecChanged`): the transform check refuses before anything is written.
    edited = _pipeline(lake, "people", columns={"r": "rand()"}, fallback_mode="SNAPSHOT_REBUILD")
    with pytest.raises(InvalidPipelineSpec, match="non-deterministic"):
        _run(spark, edited, control)
    assert rows(spark, str(lake / "people")) == [(1, "ada", 10)]
    assert control.read_states()["people"]["last_commit_version"] == 1
