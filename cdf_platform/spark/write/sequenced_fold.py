"""The fold of a key's events into SCD type 2 versions ordered and dated by `sequence_by`.

Every bronze change of a key is an *event*: its sequence value (a delete carries the deleted
row's), its source generation, its bronze commit version, its kind (insert, update, delete) and
the row's values. A key's history is the fold of its events in (sequence value, source
generation, commit version) order (after a source reset, the new table's changes come after
the old one's at the same sequence value):

- a non-delete event on an absent key (its first, or after a delete) opens a version;
- on a present key, one whose tracked values differ from the previous event's closes the open
  version and opens a new one, one whose tracked values are the same updates it in place;
- a delete closes the open version.

`__start_at` is the sequence value of the event that opened a version, `__end_at` that of the
event that closed it (NULL: the current version), `_source_commit_version` the opening event's
commit version; a version's values are its last non-delete event's, and `__changes` holds its
events. With `ignore_null_updates` an event's NULLs first take the key's last non-NULL values
since its last insert or delete, in the same order. Retired columns (bronze no longer has them)
are NULL on current versions. What a run or a rebuild folds, and how the result reaches
silver, is `cdf_platform.spark.write.sequenced_history`.

Example:
    >>> shape = HistoryShape.of(silver.schema)  # doctest: +SKIP
    >>> events = stored_events(silver, layout).unionByName(  # doctest: +SKIP
    ...     change_events(changes, layout, shape, generation)
    ... )
    >>> versions = folded_versions(events, layout, shape)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.core.sql import quote_ident
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, COMMIT_VERSION
from cdf_platform.spark.table.silver_layout import (
    CHANGES,
    END_AT,
    EVENT_GENERATION,
    EVENT_KIND,
    EVENT_SEQUENCE,
    EVENT_VALUES,
    EVENT_VERSION,
    SOURCE_VERSION,
    START_AT,
    SilverLayout,
    comparable_sql,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, StructType

EVENT = "_e"
"""The column holding an event (a struct of the `__changes` element's fields) beside its key."""
_ORDER = "_order"
_VALUES = "_v"


@dataclass(frozen=True)
class HistoryShape:
    """Silver's history columns as its schema has them: every value column a change holds
    (retired ones included) with its type, and the sequence type."""

    values_type: StructType
    sequence_type: DataType

    @classmethod
    def of(cls, silver: StructType) -> HistoryShape:
        """The shape of a silver table with schema `silver` (its `__changes` element)."""
        event = silver[CHANGES].dataType.elementType  # type: ignore[attr-defined]
        return cls(event[EVENT_VALUES].dataType, event[EVENT_SEQUENCE].dataType)

    @property
    def value_fields(self) -> list[str]:
        """The value columns an event holds, in schema order."""
        return [f.name for f in self.values_type.fields]

    def comparable(self, column: str, expression: str) -> str:
        """`expression`, a value of `column`, in a form compared by value
        (`comparable_sql`)."""
        return comparable_sql(expression, self.values_type[column].dataType)


def event_struct(
    sequence: Column, generation: int, version: Column, kind: Column, values: Column
) -> Column:
    """An event, as a `__changes` element, in column `EVENT`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return F.struct(
        sequence.alias(EVENT_SEQUENCE),
        F.lit(generation).cast("int").alias(EVENT_GENERATION),
        version.cast("bigint").alias(EVENT_VERSION),
        kind.alias(EVENT_KIND),
        values.alias(EVENT_VALUES),
    ).alias(EVENT)


def row_values(frame: DataFrame, shape: HistoryShape) -> Column:
    """A row's value columns as an event's values (NULL where the row lacks a column)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return F.struct(
        *(
            (F.col(quote_ident(f.name)) if f.name in frame.columns else F.lit(None))
            .cast(f.dataType)
            .alias(f.name)
            for f in shape.values_type.fields
        )
    )


def change_events(
    changes: DataFrame, layout: SilverLayout, shape: HistoryShape, generation: int
) -> DataFrame:
    """One event per key and commit of the range (`changes`: the per-commit change rows) of
    source generation `generation`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    assert layout.sequence_by is not None
    change = F.col(CHANGE_TYPE)
    kind = F.when(change == "update_postimage", F.lit("update")).otherwise(change)
    sequence = F.col(quote_ident(layout.sequence_by)).cast(shape.sequence_type)
    return changes.select(
        *(F.col(quote_ident(k)) for k in layout.keys),
        event_struct(sequence, generation, F.col(COMMIT_VERSION), kind, row_values(changes, shape)),
    )


def stored_events(rows: DataFrame, layout: SilverLayout) -> DataFrame:
    """The events silver's versions `rows` hold."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return rows.select(
        *(F.col(quote_ident(k)) for k in layout.keys), F.explode(CHANGES).alias(EVENT)
    )


def event_order() -> Column:
    """An event's place in its key's history: sequence value, then source generation (a
    recreated bronze numbers its commits from 0 again), then commit version."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    event = F.col(EVENT)
    return F.struct(
        event[EVENT_SEQUENCE].alias("s"),
        event[EVENT_GENERATION].alias("g"),
        event[EVENT_VERSION].alias("v"),
    )


def _in_order(left: Column, right: Column) -> Column:
    """`array_sort` comparator of two events in `event_order`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    compared = F.lit(0)
    for field in reversed((EVENT_SEQUENCE, EVENT_GENERATION, EVENT_VERSION)):
        lf, rf = left[field], right[field]
        compared = F.when(lf < rf, -1).when(lf > rf, 1).otherwise(compared)
    return compared


def _filled_values(events: DataFrame, layout: SilverLayout, shape: HistoryShape) -> DataFrame:
    """`events` with `_v`: each event's values, NULLs filled per `ignore_null_updates` (the
    last non-NULL value since the key's last insert or delete, in order)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys = [F.col(quote_ident(k)) for k in layout.keys]
    raw = F.col(EVENT)[EVENT_VALUES]
    kind = F.col(EVENT)[EVENT_KIND]
    if not layout.ignore_null_updates:
        return events.withColumn(_VALUES, raw)
    running = (
        Window.partitionBy(*keys)
        .orderBy(_ORDER)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    segmented = events.withColumn(
        "_restart", F.sum(kind.isin("insert", "delete").cast("int")).over(running)
    )
    in_segment = (
        Window.partitionBy(*keys, F.col("_restart"))
        .orderBy(_ORDER)
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    fillable = set(layout.value_columns)
    fields = [
        (
            F.last(F.when(kind != "delete", raw[c]), ignorenulls=True).over(in_segment)
            if c in fillable
            else raw[c]
        ).alias(c)
        for c in shape.value_fields
    ]
    return segmented.withColumn(_VALUES, F.struct(*fields)).drop("_restart")


def folded_versions(events: DataFrame, layout: SilverLayout, shape: HistoryShape) -> DataFrame:
    """The versions the fold of `events` gives (module doc): keys, every value column,
    `_source_commit_version`, `__start_at`, `__end_at`, `__changes`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys = [F.col(quote_ident(k)) for k in layout.keys]
    kind = F.col(EVENT)[EVENT_KIND]
    ordered = _filled_values(events.withColumn(_ORDER, event_order()), layout, shape)
    tracked = [
        F.expr(shape.comparable(c, f"{_VALUES}.{quote_ident(c)}")).alias(c) for c in layout.tracked
    ]
    by_order = Window.partitionBy(*keys).orderBy(_ORDER)
    running = by_order.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    signed = ordered.withColumn("_sig", F.struct(*tracked) if tracked else F.lit(True))
    previous = F.lag(kind).over(by_order)
    opens = (kind != "delete") & (
        previous.isNull()
        | (previous == "delete")
        | ~F.col("_sig").eqNullSafe(F.lag("_sig").over(by_order))
    )
    segmented = signed.withColumn("_segment", F.sum(opens.cast("int")).over(running))
    grouped = (
        segmented.filter(F.col("_segment") > 0)
        .groupBy(*keys, "_segment")
        .agg(
            F.min(_ORDER).alias("_first"),
            F.max_by(F.col(_VALUES), F.when(kind != "delete", F.col(_ORDER))).alias("_last_v"),
            # The delete that closed the version: the segment's first (a later one, such as a
            # row `where` keeps out updated again, finds the key absent already).
            F.min(F.when(kind == "delete", F.col(_ORDER)["s"])).alias("_closed_at"),
            F.collect_list(EVENT).alias("_events"),
        )
    )
    by_segment = Window.partitionBy(*keys).orderBy("_segment")
    end = F.when(F.col("_closed_at").isNotNull(), F.col("_closed_at")).otherwise(
        F.lead(F.col("_first")["s"]).over(by_segment)
    )
    ended = grouped.withColumn(END_AT, end)
    retired = set(layout.retired_columns)
    values = [
        (
            F.when(F.col(END_AT).isNull(), F.lit(None)).otherwise(F.col("_last_v")[c])
            if c in retired
            else F.col("_last_v")[c]
        ).alias(c)
        for c in shape.value_fields
    ]
    return ended.select(
        *keys,
        *values,
        F.col("_first")["v"].alias(SOURCE_VERSION),
        F.col("_first")["s"].alias(START_AT),
        F.col(END_AT),
        F.array_sort(F.col("_events"), _in_order).alias(CHANGES),
    )
