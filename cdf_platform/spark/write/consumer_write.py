"""A consumer asset's write (`MergeRows` or `ReplaceRows`, `cdf_platform.spark.read.batch`),
committed with every input's pinned version in the same commit: a MERGE on the declared keys or
a full replacement, stamped with the consumer's watermarks (`cdf_platform.state.
consumer_marks`). A crash before the commit leaves the old data with the old watermarks, after
it the new with the new, and a rerun reads exactly what is left.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.faults import FaultPoint, fault_point
from cdf_platform.core.sql import create_table_sql, quote_ident, sql_path
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.spark.read.batch import FEED_COLUMNS, ChangeBatch, MergeRows, TableWrite
from cdf_platform.spark.read.change_feed import ReadContext, classified
from cdf_platform.spark.write.merge import TxnStamp, stamped
from cdf_platform.spark.write.merge_sql import (
    DELETE,
    SOURCE_VIEW,
    insert_values,
    merge_statement,
    update_set,
    when_matched,
    when_not_matched,
)
from cdf_platform.state.consumer_marks import InputMark, encode_app_id
from cdf_platform.state.watermark import OWNER_PROPERTY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def consumer_stamp(
    consumer: str,
    counter: int,
    batches: Sequence[ChangeBatch],
    code_version: str | None = None,
) -> TxnStamp:
    """The transaction that records every input's pinned version (and the consumer's code
    version) with the write."""
    inputs = {b.plan.input_id: InputMark(b.plan.end_version, b.plan.table_id) for b in batches}
    metadata = json.dumps(
        {
            "cdf_platform": {
                "consumer": consumer,
                "run": counter,
                "inputs": {k: m.version for k, m in inputs.items()},
                "code_version": code_version,
            }
        },
        sort_keys=True,
    )
    app_id = encode_app_id(consumer, inputs, code_version)
    return TxnStamp(app_id=app_id, version=counter, metadata=metadata)


def _ensure_table(
    spark: SparkSession, table: str, rows: DataFrame, consumer: str, storage: StorageConfig
) -> None:
    """Create the consumer's table (change feed on, owned by `consumer`) or add the columns
    `rows` has that it lacks (the table's log read with the lake's options, `storage`)."""
    fields = [f for f in rows.schema.fields if f.name not in FEED_COLUMNS]
    if not is_delta_table(table, storage):
        schema = {f.name: f.dataType.simpleString() for f in fields}
        properties = {"delta.enableChangeDataFeed": "true", OWNER_PROPERTY: consumer}
        spark.sql(create_table_sql(table, schema, properties))
        return
    existing = set(spark.read.format("delta").load(table).columns)
    added = [f for f in fields if f.name not in existing]
    if added:
        columns = ", ".join(f"{quote_ident(f.name)} {f.dataType.simpleString()}" for f in added)
        spark.sql(f"ALTER TABLE {sql_path(table)} ADD COLUMNS ({columns})")


def merge_rows_sql(table: str, output: MergeRows, columns: Sequence[str]) -> str:
    """The MERGE of `output` (view `cdf_platform_source`) into `table`."""
    on = " AND ".join(f"t.{quote_ident(k)} <=> s.{quote_ident(k)}" for k in output.keys)
    update = dict(output.update or {})
    assignments = [
        f"{quote_ident(c)} = {update.get(c, f's.{quote_ident(c)}')}"
        for c in columns
        if c not in output.keys
    ]
    clauses = []
    if output.delete_when:
        clauses.append(when_matched(f"({output.delete_when})", DELETE))
    if output.delete_matched_when:
        clauses.append(when_matched(f"({output.delete_matched_when})", DELETE))
    if assignments:
        clauses.append(when_matched(None, update_set(assignments)))
    kept = f"NOT ({output.delete_when})" if output.delete_when else None
    clauses.append(when_not_matched(kept, insert_values(columns)))
    return merge_statement(table, on, clauses)


def write_output(
    spark: SparkSession,
    table: str,
    output: TableWrite,
    stamp: TxnStamp | None,
    consumer: str,
    *,
    storage: StorageConfig,
) -> None:
    """Write `output` to the consumer's `table` in one commit carrying `stamp` (its watermarks);
    `storage`: the lake's object-store options, to read the table's log with.

    Raises:
        InvalidPipelineSpec: `MergeRows` names a key the rows do not have.
        UnknownReadFailure, ...: the write failed (classified).
    """
    run = stamp.version if stamp else 0
    ctx = ReadContext(consumer, table, run, run, feed=f"the write of {consumer}, run counter")
    rows = output.rows
    if isinstance(output, MergeRows):
        missing = [k for k in output.keys if k not in rows.columns]
        if missing or not output.keys:
            raise InvalidPipelineSpec(
                f"MergeRows keys {list(output.keys)} are not columns of the rows ({rows.columns})",
                pipeline_id=consumer,
                table=table,
                action="return MergeRows with keys the rows hold",
            )
    classified(ctx, lambda: _ensure_table(spark, table, rows, consumer, storage))
    fault_point(FaultPoint.BEFORE_CONSUMER_WRITE)

    def write() -> None:
        if isinstance(output, MergeRows):
            rows.createOrReplaceTempView(SOURCE_VIEW)
            try:
                written = [c for c in rows.columns if c not in FEED_COLUMNS]
                spark.sql(merge_rows_sql(table, output, written)).collect()
            finally:
                spark.catalog.dropTempView(SOURCE_VIEW)
        else:
            (
                rows.drop(*FEED_COLUMNS)
                .write.format("delta")
                .mode("overwrite")
                .option("overwriteSchema", "true")
                .save(table)
            )

    if stamp is None:
        classified(ctx, write)
        return
    with stamped(spark, stamp):
        classified(ctx, write)


def describe(output: TableWrite) -> str:
    """One line for the run's log."""
    if isinstance(output, MergeRows):
        return f"merge on {', '.join(output.keys)}"
    return "full replacement"
