"""Small helpers to build bronze tables and read silver in engine tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import Row, SparkSession

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import sql_path
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.faults.oracle import read_table
from cdf_platform_testkit.vacuum import vacuum_retain_zero as vacuum_retain_zero


def make_bronze(spark: SparkSession, path: str, rows: list[tuple[Any, ...]] | None = None) -> None:
    """A CDF-enabled bronze table (id BIGINT, name STRING, amount INT), optionally seeded."""
    spark.sql(
        f"CREATE TABLE {sql_path(path)} (id BIGINT, name STRING, amount INT) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    if rows:
        insert(spark, path, rows)


def insert(spark: SparkSession, path: str, rows: list[tuple[Any, ...]]) -> None:
    """One INSERT commit."""
    spark.createDataFrame(rows, "id BIGINT, name STRING, amount INT").write.format("delta").mode(
        "append"
    ).save(path)


BRONZE_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("amount", pa.int32())])


def deltalake_bronze(
    path: str, rows: list[tuple[Any, ...]], schema: pa.Schema = BRONZE_SCHEMA
) -> None:
    """`make_bronze` by deltalake, no Spark: the same columns (or `schema`'s), the change feed
    on, version 0 the empty table and version 1 the INSERT of `rows`."""
    write_deltalake(
        path, schema.empty_table(), configuration={"delta.enableChangeDataFeed": "true"}
    )
    deltalake_insert(path, rows)


def deltalake_insert(path: str, rows: list[tuple[Any, ...]]) -> None:
    """`insert` by deltalake: one append commit of `rows`, in the table's column order."""
    schema = pa.schema(DeltaTable(path).schema().to_arrow())
    batch = [dict(zip(schema.names, row, strict=True)) for row in rows]
    write_deltalake(path, pa.Table.from_pylist(batch, schema=schema), mode="append")


class Insert:
    """`INSERT INTO ... VALUES rows` (tuples in the table's column order), for
    `deltalake_commit`."""

    def __init__(self, *rows: tuple[Any, ...]) -> None:
        self.rows = list(rows)

    def __repr__(self) -> str:
        return f"Insert{tuple(self.rows)!r}"


class Update:
    """`UPDATE ... SET column = value, ... WHERE where` (a value None is NULL), for
    `deltalake_commit`."""

    def __init__(self, where: str, **values: Any) -> None:
        self.where = where
        self.values = values

    def __repr__(self) -> str:
        return f"Update({self.where!r}, **{self.values!r})"


class Delete:
    """`DELETE FROM ... WHERE where`, for `deltalake_commit`."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __repr__(self) -> str:
        return f"Delete({self.where!r})"


BronzeWrite = Insert | Update | Delete


def deltalake_commit(path: str, write: BronzeWrite) -> None:
    """`write` as exactly one commit to the Delta table at `path`, by deltalake (no Spark).
    deltalake writes no commit for an UPDATE or DELETE that matches no row: refused, so that a
    list of writes numbers the table's versions one per write."""
    before = DeltaTable(path).version()
    if isinstance(write, Insert):
        deltalake_insert(path, write.rows)
    elif isinstance(write, Update):
        updates = {column: _sql_literal(value) for column, value in write.values.items()}
        DeltaTable(path).update(updates=updates, predicate=write.where)
    else:
        DeltaTable(path).delete(write.where)
    assert DeltaTable(path).version() == before + 1, f"{write!r} wrote no commit"


def _sql_literal(value: str | int | None) -> str:
    """`value` as a SQL literal (deltalake's UPDATE takes SQL expressions)."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(int(value))


def null_key_commit(path: str, key: str = "order_id") -> None:
    """One bronze commit (deltalake, no Spark) of a copy of the table's first row with `key`
    NULL: a DATA_QUALITY problem for silver's next run."""
    table = DeltaTable(path).to_pyarrow_table()
    row = {**table.slice(0, 1).to_pylist()[0], key: None}
    write_deltalake(path, pa.Table.from_pylist([row], schema=table.schema), mode="append")


def sql(spark: SparkSession, path: str, statement: str) -> None:
    """Run `statement` with `{t}` replaced by the table reference."""
    spark.sql(statement.format(t=sql_path(path)))


def drop_column(spark: SparkSession, path: str, column: str) -> None:
    """`ALTER TABLE DROP COLUMN` on bronze, after turning on column mapping (Delta needs it)."""
    sql(
        spark,
        path,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')",
    )
    sql(spark, path, f"ALTER TABLE {{t}} DROP COLUMN {column}")


def set_deleted_file_retention(spark: SparkSession, path: str, interval: str) -> None:
    """Set bronze's `delta.deletedFileRetentionDuration` (e.g. 'interval 1 hours')."""
    sql(
        spark,
        path,
        "ALTER TABLE {t} SET TBLPROPERTIES "
        f"('delta.deletedFileRetentionDuration' = '{interval}')",
    )


def commit_feed(
    spark: SparkSession, path: str, version: int, *columns: str
) -> list[tuple[Any, ...]]:
    """Sorted (id, `_change_type`, *`columns`) of the change feed of the commit `version` of
    the Delta table at `path`."""
    frame = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", version)
        .option("endingVersion", version)
        .load(path)
    )
    return sorted((r["id"], r["_change_type"], *(r[c] for c in columns)) for r in frame.collect())


def rows(spark: SparkSession, path: str, *columns: str) -> list[tuple[Any, ...]]:
    """Sorted tuples of `columns` (default: all data columns) of the Delta table at `path`,
    values as Spark's `collect()` gives them: read with delta-rs when it reads the table as
    Spark does (`delta_rs_records`), else with Spark."""
    read = delta_rs_records(path)
    if read is not None:
        names, found = read
        selected = list(columns) or [c for c in names if not c.startswith("_")]
        if set(selected) <= set(names):
            return sorted(tuple(r[c] for c in selected) for r in found)
    return spark_rows(spark, path, *columns)


def spark_rows(spark: SparkSession, path: str, *columns: str) -> list[tuple[Any, ...]]:
    """`rows` read with Spark, whatever the table: what Spark reads of it."""
    frame = spark.read.format("delta").load(path)
    selected = frame.select(*(columns or [c for c in frame.columns if not c.startswith("_")]))
    return sorted(tuple(r) for r in selected.collect())


def live_rows(spark: SparkSession, path: str, *columns: str) -> list[tuple[Any, ...]]:
    """`rows` of `columns` of silver's live rows: `_is_deleted` false, when silver has it."""
    read = delta_rs_records(path)
    if read is not None and set(columns) <= set(read[0]):
        names, found = read
        if "_is_deleted" in names:
            found = [r for r in found if r["_is_deleted"] is False]
        return sorted(tuple(r[c] for c in columns) for r in found)
    frame = spark.read.format("delta").load(path)
    if "_is_deleted" in frame.columns:
        frame = frame.filter("NOT _is_deleted")
    return sorted(tuple(r) for r in frame.select(*columns).collect())


def records(spark: SparkSession, path: str) -> list[dict[str, Any]]:
    """Every row of the Delta table at `path` as {column: value} (in no set order), values as
    Spark's `collect()` gives them (read as `rows` reads)."""
    read = delta_rs_records(path)
    if read is not None:
        return read[1]
    return [r.asDict() for r in spark.read.format("delta").load(path).collect()]


# Reader features delta-rs applies as Spark does; a table needing another one (type widening,
# VARIANT, ...) is read with Spark.
_DELTA_RS_READS = frozenset({"deletionVectors", "timestampNtz", "columnMapping"})


def delta_rs_records(path: str) -> tuple[list[str], list[dict[str, Any]]] | None:
    """The columns and rows of the Delta table at the local absolute `path`, read with
    delta-rs (`read_table`, deletion vectors applied), each value as Spark's `collect()` gives
    it: a TIMESTAMP as a naive datetime in this process's time zone, a TIMESTAMP_NTZ as a naive
    datetime, BINARY as a bytearray, a STRUCT as a Row, a MAP as a dict, an ARRAY as a list.
    None (read it with Spark) for anything else: a catalog name or an object store URI, a
    reader feature outside `_DELTA_RS_READS`, a column type not converted here (a MAP of
    nested values, a timestamp not in microseconds)."""
    if "://" in path or not os.path.isabs(path):
        return None
    if not os.path.isdir(os.path.join(path, "_delta_log")):
        return None
    if not set(DeltaTable(path).protocol().reader_features or ()) <= _DELTA_RS_READS:
        return None
    table = pa.table(read_table(path))
    converters = _spark_values([field.type for field in table.schema])
    if converters is None:
        return None
    names = table.column_names
    columns = [
        [convert(v) for v in column.to_pylist()]
        for convert, column in zip(converters, table.columns, strict=True)
    ]
    return names, [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def _spark_values(kinds: list[pa.DataType]) -> list[Callable[[Any], Any]] | None:
    """`_spark_value` of each of `kinds`; None when one of them is left to Spark."""
    converters = []
    for kind in kinds:
        convert = _spark_value(kind)
        if convert is None:
            return None
        converters.append(convert)
    return converters


def _spark_value(kind: pa.DataType) -> Callable[[Any], Any] | None:
    """What turns delta-rs's Python value of an Arrow `kind` into Spark's (None stays None);
    None when the type is left to Spark."""
    if (
        pa.types.is_boolean(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_string_view(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_decimal(kind)
        or (pa.types.is_timestamp(kind) and kind.unit == "us" and kind.tz is None)
    ):
        return lambda v: v
    if pa.types.is_timestamp(kind) and kind.unit == "us":
        # Spark's TIMESTAMP: `datetime.fromtimestamp`, naive, in this process's time zone.
        return lambda v: None if v is None else v.astimezone().replace(tzinfo=None)
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return lambda v: None if v is None else bytearray(v)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        item = _spark_value(kind.value_type)
        if item is None:
            return None
        return lambda v: None if v is None else [item(x) for x in v]
    if pa.types.is_struct(kind):
        converters = _spark_values([field.type for field in kind])
        if converters is None:
            return None
        fields = list(zip([field.name for field in kind], converters, strict=True))
        return lambda v: None if v is None else Row(**{n: f(v[n]) for n, f in fields})
    if pa.types.is_map(kind) and not (
        pa.types.is_nested(kind.key_type) or pa.types.is_nested(kind.item_type)
    ):
        key, value = _spark_value(kind.key_type), _spark_value(kind.item_type)
        if key is None or value is None:
            return None
        return lambda v: None if v is None else {key(k): value(x) for k, x in v}
    return None


def spec_for(lake: Path, **overrides: Any) -> PipelineSpec:
    """A pipeline from `lake/bronze` to `lake/silver` keyed on id."""
    fields: dict[str, Any] = {
        "id": "people",
        "source": str(lake / "bronze"),
        "target": str(lake / "silver"),
        "keys": ["id"],
        "fallback_mode": "FAIL_FAST",
    }
    fields.update(overrides)
    return PipelineSpec(**fields)


def control_for(lake: Path) -> ControlTable:
    """The control tables of a test lake."""
    return ControlTable(str(lake / "_control"))


def assert_converged_after_kill(
    spark: SparkSession, spec: PipelineSpec, control: ControlTable
) -> None:
    """The kill-after-MERGE story (soft deletes; id 1 updated to 11 at version 2, id 2 deleted
    at 3) after its rerun: silver exact, the control table repaired from silver's log."""
    assert rows(spark, spec.target, "id", "amount", "_is_deleted", "_source_commit_version") == [
        (1, 11, False, 2),
        (2, 20, True, 3),
    ]
    assert control.read_states()[spec.id]["last_commit_version"] == 3
    assert control.read_log(spec.id)[-1]["outcome"] == "REPAIRED"
