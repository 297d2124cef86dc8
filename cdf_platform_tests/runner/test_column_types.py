"""Every column type Delta stores flows through silver: a table of scalar types under a composite
key mixing every key type, and a table of nested, MAP and VARIANT values, each through an initial
load, updates (a MAP reordered, a nested NULL), deletes, an insert, a rebuild, and SCD2 history,
with silver equal to the bronze snapshot at the watermark after every run.

Rows are compared in Python, normalised so that a comparison means equality of values: a MAP as
its sorted entries, a VARIANT as its JSON text, NaN as itself."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql.types import VariantVal

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import sql_path
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.bronze import control_for, spec_for

SCALAR_KEYS = ["k_int", "k_str", "k_date", "k_ts", "k_ntz", "k_dec", "k_bin", "k_bool"]
SCALARS = """
    k_int INT, k_str STRING, k_date DATE, k_ts TIMESTAMP, k_ntz TIMESTAMP_NTZ,
    k_dec DECIMAL(10, 2), k_bin BINARY, k_bool BOOLEAN,
    b BOOLEAN, i8 TINYINT, i16 SMALLINT, i32 INT, i64 BIGINT, f FLOAT, d DOUBLE,
    dec DECIMAL(18, 4), s STRING, bin BINARY, dt DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ
"""


def _scalar_row(n: int, d: str = "1.5") -> str:
    key = (
        f"{n}, 'k{n}', DATE'2024-01-0{n}', TIMESTAMP'2024-01-01 00:00:0{n}.123456', "
        f"TIMESTAMP_NTZ'2024-01-01 0{n}:00:00', {n}.25, X'0{n}', {'true' if n % 2 else 'false'}"
    )
    values = (
        f"true, {n}, {n * 100}, {n * 10_000}, {n * 10_000_000_000}, CAST({d} AS FLOAT), "
        f"CAST({d} AS DOUBLE), {n}.0001, 's{n}', X'FF0{n}', DATE'2025-02-0{n}', "
        f"TIMESTAMP'2025-02-01 00:00:00.00000{n}', TIMESTAMP_NTZ'2025-02-01 00:00:0{n}'"
    )
    return f"({key}, {values})"


SCALAR_STEPS = [
    # NaN, -0.0, a change of one microsecond and NULLs in every value column.
    "UPDATE {t} SET d = CAST('NaN' AS DOUBLE), f = CAST('-0.0' AS FLOAT) WHERE k_int = 1",
    "UPDATE {t} SET ts = ts + INTERVAL 1 MICROSECOND, bin = X'00' WHERE k_int = 2",
    "UPDATE {t} SET b = NULL, i8 = NULL, i16 = NULL, i32 = NULL, i64 = NULL, f = NULL, d = NULL, "
    "dec = NULL, s = NULL, bin = NULL, dt = NULL, ts = NULL, ntz = NULL WHERE k_int = 3",
    "DELETE FROM {t} WHERE k_int = 2",
    f"INSERT INTO {{t}} VALUES {_scalar_row(4)}",
]

NESTED = """
    id BIGINT, tags ARRAY<STRING>, attrs MAP<STRING, STRING>,
    addr STRUCT<city: STRING, zip: STRING>,
    deep MAP<STRING, STRUCT<n: INT, xs: ARRAY<MAP<STRING, INT>>>>, v VARIANT
"""


def _nested_row(n: int) -> str:
    return (
        f"({n}, array('a{n}', NULL), map('a', '{n}', 'b', 'x'), named_struct('city', 'c{n}', "
        f"'zip', '0{n}'), map('k', named_struct('n', {n}, 'xs', array(map('p', 1, 'q', 2))))"
        f', parse_json(\'{{"b": {n}, "a": [1, null, "s"]}}\'))'
    )


NESTED_STEPS = [
    # The same entries in another order: no change of value.
    "UPDATE {t} SET attrs = map('b', 'x', 'a', '1'), "
    "deep = map('k', named_struct('n', 1, 'xs', array(map('q', 2, 'p', 1)))), "
    """v = parse_json('{"a": [1, null, "s"], "b": 1}') WHERE id = 1""",
    # NULLs at every level.
    "UPDATE {t} SET addr = named_struct('city', NULL, 'zip', '02'), tags = array(NULL), "
    "attrs = map('a', NULL), deep = map('k', named_struct('n', NULL, 'xs', array(NULL))), "
    """v = parse_json('{"b": null}') WHERE id = 2""",
    "UPDATE {t} SET addr = NULL, tags = NULL, attrs = NULL, deep = NULL, v = NULL WHERE id = 3",
    "DELETE FROM {t} WHERE id = 1",
    f"INSERT INTO {{t}} VALUES {_nested_row(4)}",
    "UPDATE {t} SET attrs = map('a', '4', 'b', 'y'), v = parse_json('[1, 2]') WHERE id = 4",
]


def _sql(spark: SparkSession, path: str, statement: str) -> None:
    """`statement` with `{t}` replaced by the table (JSON literals keep their braces)."""
    spark.sql(statement.replace("{t}", sql_path(path)))


def _norm(value: Any) -> Any:
    """A Python value that compares equal exactly when Spark's values are equal."""
    if isinstance(value, VariantVal):
        return ("variant", value.toJson())
    if isinstance(value, Row):
        return tuple((k, _norm(v)) for k, v in value.asDict().items())
    if isinstance(value, dict):
        return ("map", tuple(sorted(((_norm(k), _norm(v)) for k, v in value.items()), key=repr)))
    if isinstance(value, list | tuple):
        return tuple(_norm(v) for v in value)
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def _normalized(rows: Sequence[Row], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    return sorted((tuple(_norm(r[c]) for c in columns) for r in rows), key=repr)


def _snapshot(spark: SparkSession, spec: PipelineSpec, version: int) -> list[Row]:
    return spark.read.format("delta").option("versionAsOf", version).load(spec.source).collect()


def _assert_silver_is_snapshot(spark: SparkSession, spec: PipelineSpec) -> None:
    watermark = read_silver_state(spec.target, spec.id).watermark
    assert watermark is not None
    bronze = _snapshot(spark, spec, watermark)
    columns = list(bronze[0].asDict()) if bronze else []
    silver = spark.read.format("delta").load(spec.target)
    if "_is_deleted" in silver.columns:
        silver = silver.filter("NOT _is_deleted")
    if "__end_at" in silver.columns:
        silver = silver.filter("__end_at IS NULL")
    assert _normalized(silver.collect(), columns) == _normalized(bronze, columns)


def _story(
    spark: SparkSession,
    lake: Path,
    schema: str,
    keys: list[str],
    seed_rows: str,
    steps: list[str],
) -> dict[str, PipelineSpec]:
    """Bronze of `schema`, three pipelines (hard deletes, soft deletes, SCD2), each
    run after the load, after `steps`, and as a rebuild, silver checked after every run."""
    specs = {
        "hard": spec_for(lake, id="hard", target=str(lake / "hard"), keys=keys),
        "soft": spec_for(lake, id="soft", target=str(lake / "soft"), keys=keys, delete_mode="soft"),
        "scd2": spec_for(lake, id="scd2", target=str(lake / "scd2"), keys=keys, history="scd2"),
    }
    source = specs["hard"].source
    spark.sql(
        f"CREATE TABLE delta.`{source}` ({schema}) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    _sql(spark, source, f"INSERT INTO {{t}} VALUES {seed_rows}")
    control = control_for(lake)

    def run_all(expected: RunMode, **kwargs: Any) -> None:
        for spec in specs.values():
            mode = PipelineRunner.on(control, lambda: spark).run(spec, **kwargs).mode
            assert mode is expected, spec.id
            _assert_silver_is_snapshot(spark, spec)

    run_all(RunMode.INITIAL_LOAD)
    for step in steps:
        _sql(spark, source, step)
    run_all(RunMode.INCREMENTAL)
    run_all(RunMode.REBUILD, force_rebuild=True)
    return specs


def _versions_of(spark: SparkSession, spec: PipelineSpec, where: str) -> int:
    return spark.read.format("delta").load(spec.target).filter(where).count()


def test_scalar_types_and_a_composite_key_of_every_key_type(
    spark: SparkSession, lake: Path
) -> None:
    rows = ", ".join(_scalar_row(n) for n in (1, 2, 3))
    specs = _story(spark, lake, SCALARS, SCALAR_KEYS, rows, SCALAR_STEPS)
    # SCD2: the one-microsecond change opened a version; key 3's NULLs too.
    assert _versions_of(spark, specs["scd2"], "k_int = 2") == 2
    assert _versions_of(spark, specs["scd2"], "k_int = 3") == 2


def test_nested_map_and_variant_values(spark: SparkSession, lake: Path) -> None:
    rows = ", ".join(_nested_row(n) for n in (1, 2, 3))
    specs = _story(spark, lake, NESTED, ["id"], rows, NESTED_STEPS)
    # SCD2: reordering a MAP's entries or a VARIANT object's keys is no change of value.
    history = spark.read.format("delta").load(specs["scd2"].target)
    assert history.filter("id = 1").count() == 1
    assert history.filter("id = 2").count() == 2
    assert history.filter("id = 4").count() == 2


@pytest.mark.parametrize("key_type", ["MAP<STRING, INT>", "VARIANT"])
def test_a_key_spark_cannot_match_on_is_refused(
    spark: SparkSession, lake: Path, key_type: str
) -> None:
    spec = spec_for(lake, keys=["k"])
    spark.sql(
        f"CREATE TABLE delta.`{spec.source}` (k {key_type}, v INT) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    value = "map('a', 1)" if key_type.startswith("MAP") else "parse_json('1')"
    _sql(spark, spec.source, f"INSERT INTO {{t}} VALUES ({value}, 1)")
    with pytest.raises(InvalidPipelineSpec, match="cannot be keys") as caught:
        PipelineRunner.on(ControlTable(str(lake / "c")), lambda: spark).run(spec)
    assert "What to do" in str(caught.value)
