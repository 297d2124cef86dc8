"""SCD type 2 silver (`history: scd2`): every version of a row, with `__start_at` and `__end_at`.

A version opens with the bronze commit that inserted the key, or that changed a tracked column
(`track_history_columns`, or all value columns but `track_history_except_columns`), and closes
(`__end_at` = that commit's timestamp) with the next such change or the key's delete. A change of
untracked columns only updates the open version in place. `__end_at` NULL marks the current
version; `_source_commit_version` is the bronze version that opened it.

Both writes are one MERGE each, stamped with the watermark like SCD1's, over a staged source of
two kinds of rows: `current` rows match silver's open version of a key (to close it, or update it
in place), `insert` rows never match and add versions.

- Incremental: every commit's change of a key in the range is replayed in commit order against
  silver's open version, so the history does not depend on how commits were split into runs.
- `ignore_null_updates`: a change's NULLs take the key's last non-NULL value since its last
  insert or delete (silver's open version counts as the range's first change) before anything
  is compared, in the incremental runs and in a rebuild (a NULL in the snapshot keeps the open
  version's value), so a NULL update opens no version.
- Rebuild: the snapshot only shows each key's state at the pinned version V, so it closes open
  versions whose key is gone or whose tracked values differ, and opens versions for new or
  changed keys, all at V's timestamp. Versions between the watermark and V are not recreated
  and closed versions are never rewritten (the run's incident says so).

Example:
    >>> staged = staged_history(spark, target, changes, layout)  # doctest: +SKIP
    >>> merge_history(spark, target, staged, layout, stamp)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from cdf_platform.core.sql import quote_ident
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from cdf_platform.spark.table.silver_layout import END_AT, SOURCE_VERSION, START_AT, SilverLayout
from cdf_platform.spark.write.merge import TxnStamp, run_merge
from cdf_platform.spark.write.merge_sql import (
    insert_values,
    merge_statement,
    update_set,
    when_matched,
    when_not_matched,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_ACTION = "_action"
_CONTINUED = "_continued"
_RETIRED_HELD = "_retired_held"


def _signature(layout: SilverLayout, columns: Sequence[str]) -> Column:
    """`columns`' values as one comparable struct (MAP and VARIANT values in comparable form,
    `SilverLayout.comparable`); compare signatures with `_same`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    if not columns:
        return F.lit(True)
    return F.struct(*(F.expr(layout.comparable(c, quote_ident(c))).alias(c) for c in columns))


def _same(left: Column, right: Column) -> Column:
    """NULL-safe equality of two signatures (or of a signature and NULL: no open version)."""
    return left.eqNullSafe(right)


def _open_rows(spark: SparkSession, target: str) -> DataFrame:
    """Silver's open versions (`__end_at` NULL), every column."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return spark.read.format("delta").load(target).filter(F.col(END_AT).isNull())


def _open_versions(spark: SparkSession, target: str, layout: SilverLayout) -> DataFrame:
    """Silver's open versions: keys, the signature of the tracked values (`_cur_sig`), of all
    value columns (`_cur_all`), and whether a retired column still holds a value."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    silver = _open_rows(spark, target)
    retired_held = F.lit(False)
    for column in layout.retired_columns:
        retired_held = retired_held | F.col(quote_ident(column)).isNotNull()
    return silver.select(
        *(F.col(quote_ident(k)) for k in layout.keys),
        _signature(layout, layout.tracked).alias("_cur_sig"),
        _signature(layout, layout.value_columns).alias("_cur_all"),
        retired_held.alias(_RETIRED_HELD),
    )


def _staged_columns(layout: SilverLayout) -> list[str]:
    return [*layout.data_columns, SOURCE_VERSION, START_AT, END_AT, _ACTION, _CONTINUED]


def staged_history(
    spark: SparkSession, target: str, changes: DataFrame, layout: SilverLayout
) -> DataFrame:
    """The staged source of an incremental SCD2 MERGE from `changes` (one row per key and
    commit: data columns, `_change_type`, `_commit_timestamp`, `_commit_version`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys = [F.col(quote_ident(k)) for k in layout.keys]
    values = layout.value_columns
    if layout.ignore_null_updates:
        changes = _filled(spark, target, changes, layout)
    events = changes.withColumn("_sig", _signature(layout, layout.tracked)).join(
        _open_versions(spark, target, layout), on=list(layout.keys), how="left"
    )
    by_commit = Window.partitionBy(*keys).orderBy(COMMIT_VERSION)
    kind = F.col(CHANGE_TYPE)
    previous_kind = F.lag(kind).over(by_commit)
    first = previous_kind.isNull()
    differs = F.when(
        first, F.col("_cur_sig").isNull() | ~_same(F.col("_sig"), F.col("_cur_sig"))
    ).otherwise((previous_kind == "delete") | ~_same(F.col("_sig"), F.lag("_sig").over(by_commit)))
    opens = (kind != "delete") & differs
    boundary = (opens | (kind == "delete")).cast("int")
    running = by_commit.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    segmented = events.withColumn("_segment", F.sum(boundary).over(running))
    # One row per segment: a version (opened by its first change, or silver's open version
    # continued in segment 0) or a deletion; its values are its last change's.
    segments = segmented.groupBy(*keys, "_segment").agg(
        F.min_by(kind, F.col(COMMIT_VERSION)).alias("_start_kind"),
        F.min(COMMIT_VERSION).alias("_start_version"),
        F.min_by(F.col(COMMIT_TIMESTAMP), F.col(COMMIT_VERSION)).alias("_start_at"),
        F.max_by(F.struct(*(F.col(quote_ident(c)) for c in values)), F.col(COMMIT_VERSION)).alias(
            "_last"
        ),
        F.max(F.col("_cur_sig").isNotNull()).alias("_has_current"),
    )
    by_segment = Window.partitionBy(*keys).orderBy("_segment")
    ended = segments.withColumn("_end_at", F.lead("_start_at").over(by_segment))
    last_values = [F.col(f"_last.{quote_ident(c)}").alias(c) for c in values]
    inserts = ended.filter((F.col("_segment") > 0) & (F.col("_start_kind") != "delete")).select(
        *keys,
        *last_values,
        F.col("_start_version").alias(SOURCE_VERSION),
        F.col("_start_at").alias(START_AT),
        F.col("_end_at").alias(END_AT),
        F.lit("insert").alias(_ACTION),
        F.lit(False).alias(_CONTINUED),
    )
    # Silver's open version: continued by segment 0 (values in place) and ended where the next
    # segment starts; or, without a segment 0, ended by the range's first change.
    current = (
        ended.filter(F.col("_has_current"))
        .groupBy(*keys)
        .agg(
            F.max(F.col("_segment") == 0).alias(_CONTINUED),
            F.max_by(F.col("_last"), -F.col("_segment")).alias("_last"),
            F.min_by(
                F.when(F.col("_segment") == 0, F.col("_end_at")).otherwise(F.col("_start_at")),
                F.col("_segment"),
            ).alias(END_AT),
        )
    )
    closes = current.select(
        *keys,
        *last_values,
        F.lit(None).cast("bigint").alias(SOURCE_VERSION),
        F.lit(None).cast("timestamp").alias(START_AT),
        F.col(END_AT),
        F.lit("current").alias(_ACTION),
        F.col(_CONTINUED),
    )
    return inserts.unionByName(closes).select(*(quote_ident(c) for c in _staged_columns(layout)))


def _current_values(spark: SparkSession, target: str, layout: SilverLayout) -> DataFrame:
    """Silver's open versions: keys and value columns."""
    return _open_rows(spark, target).select(*(quote_ident(c) for c in layout.data_columns))


def _filled(
    spark: SparkSession, target: str, changes: DataFrame, layout: SilverLayout
) -> DataFrame:
    """`ignore_null_updates`: each change with its NULLs replaced by the key's last non-NULL
    value since its last insert or delete, silver's open version counting as the first change
    of the range (an insert's own NULLs stand; a delete's values are not carried)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys = list(layout.keys)
    kind = F.col(CHANGE_TYPE)
    touched = changes.select(*(quote_ident(k) for k in keys)).distinct()
    current = (
        _current_values(spark, target, layout)
        .join(touched, on=keys, how="left_semi")
        .withColumns(
            {
                CHANGE_TYPE: F.lit("current"),
                COMMIT_TIMESTAMP: F.lit(None).cast("timestamp"),
                COMMIT_VERSION: F.lit(-1).cast("bigint"),
            }
        )
    )
    events = changes.unionByName(current.select(*(quote_ident(c) for c in changes.columns)))
    by_key = Window.partitionBy(*(quote_ident(k) for k in keys)).orderBy(COMMIT_VERSION)
    running = by_key.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    restarts = F.sum(kind.isin("insert", "delete").cast("int")).over(running)
    segmented = events.withColumn("_restart", restarts)
    in_segment = (
        Window.partitionBy(*(quote_ident(k) for k in keys), "_restart")
        .orderBy(COMMIT_VERSION)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    filled = segmented.withColumns(
        {
            c: F.last(F.when(kind != "delete", F.col(quote_ident(c))), ignorenulls=True).over(
                in_segment
            )
            for c in layout.value_columns
        }
    )
    return filled.filter(kind != "current").select(*(quote_ident(c) for c in changes.columns))


def _keeping_silver_values(
    spark: SparkSession, target: str, snapshot: DataFrame, layout: SilverLayout
) -> DataFrame:
    """`ignore_null_updates`: the snapshot with its NULLs replaced by the values of silver's
    open version of the key, as the incremental runs keep them."""
    return keeping_values(snapshot, _current_values(spark, target, layout), layout)


def keeping_values(snapshot: DataFrame, current: DataFrame, layout: SilverLayout) -> DataFrame:
    """`ignore_null_updates`: `snapshot` (data columns) with its NULLs replaced by the values
    of `current` (silver's current rows of the keys: keys and value columns), as a rebuild and
    the incremental runs keep them."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    renamed = current.select(
        *(F.col(quote_ident(k)) for k in layout.keys),
        *(F.col(quote_ident(c)).alias(f"_cur_{c}") for c in layout.value_columns),
    )
    joined = snapshot.join(renamed, on=list(layout.keys), how="left")
    return joined.select(
        *(F.col(quote_ident(k)) for k in layout.keys),
        *(
            F.coalesce(F.col(quote_ident(c)), F.col(quote_ident(f"_cur_{c}"))).alias(c)
            for c in layout.value_columns
        ),
    )


def staged_reconcile(
    spark: SparkSession,
    target: str,
    snapshot: DataFrame,
    layout: SilverLayout,
    version: int,
    at: datetime,
) -> DataFrame:
    """The staged source of an SCD2 rebuild from the snapshot at `version` (timestamp `at`)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys = [F.col(quote_ident(k)) for k in layout.keys]
    values = layout.value_columns
    moment = F.lit(at).cast("timestamp")
    if layout.ignore_null_updates:
        snapshot = _keeping_silver_values(spark, target, snapshot, layout)
    joined = snapshot.withColumns(
        {
            "_sig": _signature(layout, layout.tracked),
            "_all": _signature(layout, values),
            "_in_snapshot": F.lit(True),
        }
    ).join(_open_versions(spark, target, layout), on=list(layout.keys), how="full_outer")
    in_snapshot = F.col("_in_snapshot").isNotNull()
    in_silver = F.col("_cur_sig").isNotNull()
    changed = in_snapshot & in_silver & ~_same(F.col("_sig"), F.col("_cur_sig"))
    value_cols = [F.col(quote_ident(c)) for c in values]
    inserts = joined.filter((in_snapshot & ~in_silver) | changed).select(
        *keys,
        *value_cols,
        F.lit(version).cast("bigint").alias(SOURCE_VERSION),
        moment.alias(START_AT),
        F.lit(None).cast("timestamp").alias(END_AT),
        F.lit("insert").alias(_ACTION),
        F.lit(False).alias(_CONTINUED),
    )
    # An open version whose values differ only in untracked columns, or that still holds a
    # value in a retired column (bronze no longer has it), is rewritten in place.
    rewritten = ~_same(F.col("_all"), F.col("_cur_all")) | F.coalesce(
        F.col(_RETIRED_HELD), F.lit(False)
    )
    in_place = in_snapshot & in_silver & ~changed & rewritten
    closes = joined.filter((in_silver & ~in_snapshot) | changed | in_place).select(
        *keys,
        *value_cols,
        F.lit(None).cast("bigint").alias(SOURCE_VERSION),
        F.lit(None).cast("timestamp").alias(START_AT),
        F.when(in_place, F.lit(None).cast("timestamp")).otherwise(moment).alias(END_AT),
        F.lit("current").alias(_ACTION),
        in_place.alias(_CONTINUED),
    )
    return inserts.unionByName(closes).select(*(quote_ident(c) for c in _staged_columns(layout)))


def rebuild_note(watermark: int, version: int) -> str:
    """What an SCD2 rebuild from `watermark` to `version` cannot put in the history."""
    return (
        f"scd2 rebuild at version {version}: open versions of keys gone or changed were closed "
        f"and new ones opened at version {version}; changes between versions {watermark} and "
        f"{version} are not in the history"
    )


def merge_history_sql(target: str, layout: SilverLayout) -> str:
    """The MERGE of a staged SCD2 source (view `cdf_platform_source`) into silver."""
    stale = f"NOT ({layout.unchanged()}) OR {layout.holds_retired_value()}"
    rewrite = f"(s.{_CONTINUED} AND ({stale}))"
    # A continued version takes the source's values and NULL in the retired columns; a closed
    # one keeps what it held.
    in_place = [
        f"{quote_ident(c)} = CASE WHEN s.{_CONTINUED} THEN {value} ELSE t.{quote_ident(c)} END"
        for c, value in [
            *((c, f"s.{quote_ident(c)}") for c in layout.value_columns),
            *((c, "NULL") for c in layout.retired_columns),
        ]
    ]
    inserted = [*layout.data_columns, SOURCE_VERSION, START_AT, END_AT]
    on = f"s.{_ACTION} = 'current' AND t.{END_AT} IS NULL AND {layout.on_clause()}"
    clauses = [
        when_matched(
            f"(s.{END_AT} IS NOT NULL OR {rewrite})",
            update_set([f"{END_AT} = s.{END_AT}", *in_place]),
        ),
        when_not_matched(f"s.{_ACTION} = 'insert'", insert_values(inserted)),
    ]
    return merge_statement(target, on, clauses)


def merge_history(
    spark: SparkSession, target: str, staged: DataFrame, layout: SilverLayout, stamp: TxnStamp
) -> None:
    """Apply a staged SCD2 source to silver; the commit carries `stamp` (the watermark)."""
    run_merge(spark, staged, merge_history_sql(target, layout), stamp)
