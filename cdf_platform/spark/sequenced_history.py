"""SCD type 2 silver ordered and dated by `sequence_by` (`history: scd2` with `sequence_by`).

Every bronze change of a key is an *event*: its sequence value (a delete carries the deleted
row's), its bronze commit version, its kind (insert, update, delete) and the row's values. A
key's history is the fold of its events in (sequence value, commit version) order (after a
source reset, the new table's changes come after the old one's at the same sequence value):

- a non-delete event on an absent key (its first, or after a delete) opens a version;
- on a present key, one whose tracked values differ from the previous event's closes the open
  version and opens a new one, one whose tracked values are the same updates it in place;
- a delete closes the open version.

`__start_at` is the sequence value of the event that opened a version, `__end_at` that of the
event that closed it (NULL: the current version), `_source_commit_version` the opening event's
commit version; a version's values are its last non-delete event's. With `ignore_null_updates`
an event's NULLs first take the key's last non-NULL values since its last insert or delete, in
the same order. Retired columns (bronze no longer has them) are NULL on current versions.

A change that arrives late (an older sequence value in a later commit) belongs *inside* the
history, possibly inside a version whose in-place updates the version's own values no longer
show. So each version keeps its events in `__changes`, and a run re-folds the events of every
key it touches (stored ones and the range's) and writes only the versions that differ: the
history is exact, whatever order the changes arrived in and however the commits were split
into runs. Versions are matched on key and opening event (its commit version, source
generation and sequence value), which no two versions of a key share (an event log may open two
versions of a key in one commit, at different sequence values).

A rebuild at bronze version V adds, per key of the snapshot, an update event at V (unless the
key already holds an event with the same sequence value and values), and a delete at V, dated
by the key's last sequence value, for a key whose history ends present but that the snapshot no
longer holds (the snapshot does not say when it left); then it re-folds like a run.

Example:
    >>> staged = staged_sequenced_history(spark, target, changes, layout)  # doctest: +SKIP
    >>> merge_sequenced_history(spark, target, staged, layout, stamp)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.core.sql import quote_ident
from cdf_platform.spark import merge_sql
from cdf_platform.spark.change_feed import CHANGE_TYPE, COMMIT_VERSION
from cdf_platform.spark.merge import TxnStamp, run_merge
from cdf_platform.spark.silver_layout import (
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
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

_EVENT = "_e"
_ORDER = "_order"
_VALUES = "_v"
_ACTION = "_action"
# The source generation of a version's opening change: with the opening commit version, what
# tells two versions of a key apart (a recreated bronze numbers its commits from 0 again).
_OPENED_IN = "_opened_in"


@dataclass(frozen=True)
class _Shape:
    """Silver's history columns as its schema has them: every value column a change holds
    (retired ones included) with its type, and the sequence type."""

    values_type: StructType
    sequence_type: DataType

    @classmethod
    def of(cls, silver: StructType) -> _Shape:
        event = silver[CHANGES].dataType.elementType  # type: ignore[attr-defined]
        return cls(event[EVENT_VALUES].dataType, event[EVENT_SEQUENCE].dataType)

    @property
    def value_fields(self) -> list[str]:
        return [f.name for f in self.values_type.fields]

    def comparable(self, column: str, expression: str) -> str:
        return comparable_sql(expression, self.values_type[column].dataType)


def _event(
    sequence: Column, generation: int, version: Column, kind: Column, values: Column
) -> Column:
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return F.struct(
        sequence.alias(EVENT_SEQUENCE),
        F.lit(generation).cast("int").alias(EVENT_GENERATION),
        version.cast("bigint").alias(EVENT_VERSION),
        kind.alias(EVENT_KIND),
        values.alias(EVENT_VALUES),
    ).alias(_EVENT)


def _row_values(frame: DataFrame, shape: _Shape) -> Column:
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


def _change_events(
    changes: DataFrame, layout: SilverLayout, shape: _Shape, generation: int
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
        _event(sequence, generation, F.col(COMMIT_VERSION), kind, _row_values(changes, shape)),
    )


def _stored_events(rows: DataFrame, layout: SilverLayout) -> DataFrame:
    """The events silver's versions `rows` hold."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return rows.select(
        *(F.col(quote_ident(k)) for k in layout.keys), F.explode(CHANGES).alias(_EVENT)
    )


def _order() -> Column:
    """An event's place in its key's history: sequence value, then source generation (a
    recreated bronze numbers its commits from 0 again), then commit version."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    event = F.col(_EVENT)
    return F.struct(
        event[EVENT_SEQUENCE].alias("s"),
        event[EVENT_GENERATION].alias("g"),
        event[EVENT_VERSION].alias("v"),
    )


def _in_order(left: Column, right: Column) -> Column:
    """`array_sort` comparator of two events in `_order`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    compared = F.lit(0)
    for field in reversed((EVENT_SEQUENCE, EVENT_GENERATION, EVENT_VERSION)):
        lf, rf = left[field], right[field]
        compared = F.when(lf < rf, -1).when(lf > rf, 1).otherwise(compared)
    return compared


def _filled_values(events: DataFrame, layout: SilverLayout, shape: _Shape) -> DataFrame:
    """`events` with `_v`: each event's values, NULLs filled per `ignore_null_updates` (the
    last non-NULL value since the key's last insert or delete, in order)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys = [F.col(quote_ident(k)) for k in layout.keys]
    raw = F.col(_EVENT)[EVENT_VALUES]
    kind = F.col(_EVENT)[EVENT_KIND]
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


def _versions(events: DataFrame, layout: SilverLayout, shape: _Shape) -> DataFrame:
    """The versions the fold of `events` gives (module doc): keys, every value column,
    `_source_commit_version`, `__start_at`, `__end_at`, `__changes`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys = [F.col(quote_ident(k)) for k in layout.keys]
    kind = F.col(_EVENT)[EVENT_KIND]
    ordered = _filled_values(events.withColumn(_ORDER, _order()), layout, shape)
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
            F.collect_list(_EVENT).alias("_events"),
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


def _fingerprint(shape: _Shape) -> Column:
    """What a version row says, in comparable form: its dates, values and events."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    events = F.transform(
        F.col(CHANGES),
        lambda e: F.struct(e[EVENT_SEQUENCE], e[EVENT_GENERATION], e[EVENT_VERSION], e[EVENT_KIND]),
    )
    values = [F.expr(shape.comparable(c, quote_ident(c))).alias(c) for c in shape.value_fields]
    return F.struct(F.col(START_AT), F.col(END_AT), events.alias("events"), *values)


def _staged(
    current: DataFrame, versions: DataFrame, layout: SilverLayout, shape: _Shape
) -> DataFrame:
    """The versions to write: `versions` (the re-folded history of the touched keys) against
    `current` (silver's versions of those keys), each with `_action` insert, update or
    delete; a version that is already as it should be is left out."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    match = [*layout.keys, SOURCE_VERSION, START_AT, _OPENED_IN]
    opened_in = F.col(CHANGES)[0][EVENT_GENERATION].alias(_OPENED_IN)
    old = current.select(
        *(quote_ident(c) for c in match[:-1]), opened_in, _fingerprint(shape).alias("_old")
    )
    new = versions.withColumns({"_new": _fingerprint(shape), _OPENED_IN: opened_in})
    joined = new.join(old, on=match, how="full_outer")
    action = (
        F.when(F.col("_old").isNull(), F.lit("insert"))
        .when(F.col("_new").isNull(), F.lit("delete"))
        .when(~F.col("_new").eqNullSafe(F.col("_old")), F.lit("update"))
    )
    columns = [*layout.keys, *shape.value_fields, SOURCE_VERSION, START_AT, END_AT, CHANGES]
    return (
        joined.withColumn(_ACTION, action)
        .filter(F.col(_ACTION).isNotNull())
        .select(*(quote_ident(c) for c in columns), _OPENED_IN, _ACTION)
    )


def staged_sequenced_history(
    spark: SparkSession,
    target: str,
    changes: DataFrame,
    layout: SilverLayout,
    generation: int,
    *,
    skip_known: bool = False,
    recorded_deletes: DataFrame | None = None,
) -> DataFrame:
    """The staged source of an incremental run from `changes` (one row per key and commit:
    data columns, `_change_type`, `_commit_version`) of source generation `generation`.
    `skip_known` (a fold of the events an event log still holds) leaves out each change whose
    key already holds an event of the same kind and sequence value. `recorded_deletes` (an
    event log's tombstones, as delete change rows) are deletes a key may hold no version of (it
    was absent when they arrived): each joins its key's fold when the key is touched and does
    not hold it already, so an older event arriving later opens a version that it closes."""
    silver = spark.read.format("delta").load(target)
    shape = _Shape.of(silver.schema)
    keys = list(layout.keys)
    arriving = _change_events(changes, layout, shape, generation)
    if skip_known:
        arriving = _not_held(arriving, _stored_events(silver, layout), keys)
    current = silver.join(arriving.select(*keys).distinct(), on=keys, how="left_semi")
    stored = _stored_events(current, layout)
    if recorded_deletes is not None:
        recorded = _change_events(recorded_deletes, layout, shape, generation).join(
            arriving.select(*keys).distinct(), on=keys, how="left_semi"
        )
        arriving = arriving.unionByName(_not_held(recorded, stored.unionByName(arriving), keys))
    events = stored.unionByName(arriving)
    return _staged(current, _versions(events, layout, shape), layout, shape)


def _not_held(events: DataFrame, held: DataFrame, keys: list[str]) -> DataFrame:
    """`events` but those whose key holds an event of the same kind and sequence value in
    `held`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    known = held.select(
        *(F.col(quote_ident(k)).alias(f"_k_{k}") for k in keys),
        F.col(_EVENT)[EVENT_SEQUENCE].alias("_ks"),
        F.col(_EVENT)[EVENT_KIND].alias("_kk"),
    )
    condition = [F.col(quote_ident(k)) == F.col(f"_k_{k}") for k in keys] + [
        F.col(_EVENT)[EVENT_SEQUENCE] == F.col("_ks"),
        F.col(_EVENT)[EVENT_KIND] == F.col("_kk"),
    ]
    return events.join(known, on=condition, how="left_anti")


def staged_sequenced_reconcile(
    spark: SparkSession,
    target: str,
    snapshot: DataFrame,
    layout: SilverLayout,
    version: int,
    generation: int,
) -> DataFrame:
    """The staged source of a rebuild from the snapshot at `version` of source generation
    `generation` (module doc)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    assert layout.sequence_by is not None
    silver = spark.read.format("delta").load(target)
    shape = _Shape.of(silver.schema)
    keys = list(layout.keys)
    stored = _stored_events(silver, layout)
    observed = snapshot.select(
        *(F.col(quote_ident(k)) for k in keys),
        _event(
            F.col(quote_ident(layout.sequence_by)).cast(shape.sequence_type),
            generation,
            F.lit(version),
            F.lit("update"),
            _row_values(snapshot, shape),
        ),
    )
    fresh = _unknown(observed, stored, layout, shape)
    last = stored.groupBy(*keys).agg(F.max_by(F.col(_EVENT), _order()).alias(_EVENT))
    gone = (
        last.filter(F.col(_EVENT)[EVENT_KIND] != "delete")
        .join(snapshot.select(*keys), on=keys, how="left_anti")
        .select(
            *keys,
            _event(
                F.col(_EVENT)[EVENT_SEQUENCE],
                generation,
                F.lit(version),
                F.lit("delete"),
                F.col(_EVENT)[EVENT_VALUES],
            ),
        )
    )
    arriving = fresh.unionByName(gone)
    # A current version still holding a value in a retired column is re-folded too (to NULL).
    held = F.lit(False)
    for column in layout.retired_columns:
        held = held | F.col(quote_ident(column)).isNotNull()
    holding = silver.filter(F.col(END_AT).isNull() & held)
    touched = arriving.select(*keys).unionByName(holding.select(*keys)).distinct()
    current = silver.join(touched, on=keys, how="left_semi")
    events = _stored_events(current, layout).unionByName(arriving)
    return _staged(current, _versions(events, layout, shape), layout, shape)


def _unknown(
    observed: DataFrame, stored: DataFrame, layout: SilverLayout, shape: _Shape
) -> DataFrame:
    """The snapshot's events whose key holds no non-delete event with the same sequence value
    and the same values already (on the columns bronze still has: the snapshot holds nothing
    in a retired one, and a closed version keeps what it held)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    def same(frame: DataFrame, alias: str) -> DataFrame:
        values = F.struct(
            *(
                F.expr(shape.comparable(c, f"{_EVENT}.{EVENT_VALUES}.{quote_ident(c)}")).alias(c)
                for c in layout.value_columns
            )
        )
        return frame.select(
            *(F.col(quote_ident(k)).alias(f"{alias}{k}") for k in layout.keys),
            F.col(_EVENT)[EVENT_SEQUENCE].alias(f"{alias}s"),
            values.alias(f"{alias}v"),
            *((F.col(_EVENT).alias(_EVENT),) if alias == "o_" else ()),
        )

    known = same(stored.filter(F.col(_EVENT)[EVENT_KIND] != "delete"), "k_")
    candidates = same(observed, "o_")
    condition = [F.col(f"o_{k}") == F.col(f"k_{k}") for k in layout.keys] + [
        F.col("o_s") == F.col("k_s"),
        F.col("o_v").eqNullSafe(F.col("k_v")),
    ]
    fresh = candidates.join(known, on=condition, how="left_anti")
    return fresh.select(*(F.col(f"o_{k}").alias(k) for k in layout.keys), F.col(_EVENT))


def merge_sequenced_history_sql(target: str, layout: SilverLayout, value_fields: list[str]) -> str:
    """The MERGE of a staged source (view `cdf_platform_source`, `_action` per row) into silver:
    versions matched on key and opening event are deleted or rewritten, new ones inserted."""
    rewritten = [*value_fields, START_AT, END_AT, CHANGES]
    assignments = [f"{quote_ident(c)} = s.{quote_ident(c)}" for c in rewritten]
    inserted = [*layout.keys, *rewritten, SOURCE_VERSION]
    on = (
        f"{layout.on_clause()} AND t.{SOURCE_VERSION} = s.{SOURCE_VERSION}"
        f" AND t.{START_AT} = s.{START_AT}"
        f" AND t.{CHANGES}[0].{EVENT_GENERATION} <=> s.{_OPENED_IN}"
    )
    clauses = [
        merge_sql.when_matched(f"s.{_ACTION} = 'delete'", merge_sql.DELETE),
        merge_sql.when_matched(f"s.{_ACTION} = 'update'", merge_sql.update_set(assignments)),
        merge_sql.when_not_matched(f"s.{_ACTION} = 'insert'", merge_sql.insert_values(inserted)),
    ]
    return merge_sql.merge_statement(target, on, clauses)


def merge_sequenced_history(
    spark: SparkSession, target: str, staged: DataFrame, layout: SilverLayout, stamp: TxnStamp
) -> None:
    """Apply a staged source to silver; the commit carries `stamp` (the watermark)."""
    value_fields = [c for c in staged.columns if c not in (*layout.keys, SOURCE_VERSION)]
    platform = (START_AT, END_AT, CHANGES, _OPENED_IN, _ACTION)
    value_fields = [c for c in value_fields if c not in platform]
    run_merge(spark, staged, merge_sequenced_history_sql(target, layout, value_fields), stamp)
