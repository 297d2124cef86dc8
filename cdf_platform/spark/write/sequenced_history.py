"""SCD type 2 silver ordered and dated by `sequence_by` (`history: scd2` with `sequence_by`):
what a run and a rebuild stage, and the MERGE that writes it.

A key's versions are the fold of its events (`cdf_platform.spark.write.sequenced_fold`, which states
the rules). A change that arrives late (an older sequence value in a later commit) belongs
*inside* the history, possibly inside a version whose in-place updates the version's own values
no longer show. So each version keeps its events in `__changes`, and a run re-folds the events
of every key it touches (stored ones and the range's) and writes only the versions that differ:
the history is exact, whatever order the changes arrived in and however the commits were split
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

from typing import TYPE_CHECKING

from cdf_platform.core.sql import quote_ident
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
)
from cdf_platform.spark.write import merge_sql
from cdf_platform.spark.write.merge import TxnStamp, run_merge
from cdf_platform.spark.write.sequenced_fold import (
    EVENT,
    HistoryShape,
    change_events,
    event_order,
    event_struct,
    folded_versions,
    row_values,
    stored_events,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

_ACTION = "_action"
# The source generation of a version's opening change: with the opening commit version, what
# tells two versions of a key apart (a recreated bronze numbers its commits from 0 again).
_OPENED_IN = "_opened_in"


def _fingerprint(shape: HistoryShape) -> Column:
    """What a version row says, in comparable form: its dates, values and events."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    events = F.transform(
        F.col(CHANGES),
        lambda e: F.struct(e[EVENT_SEQUENCE], e[EVENT_GENERATION], e[EVENT_VERSION], e[EVENT_KIND]),
    )
    values = [F.expr(shape.comparable(c, quote_ident(c))).alias(c) for c in shape.value_fields]
    return F.struct(F.col(START_AT), F.col(END_AT), events.alias("events"), *values)


def _staged(
    current: DataFrame, versions: DataFrame, layout: SilverLayout, shape: HistoryShape
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
    shape = HistoryShape.of(silver.schema)
    keys = list(layout.keys)
    arriving = change_events(changes, layout, shape, generation)
    if skip_known:
        arriving = _not_held(arriving, stored_events(silver, layout), keys)
    current = silver.join(arriving.select(*keys).distinct(), on=keys, how="left_semi")
    stored = stored_events(current, layout)
    if recorded_deletes is not None:
        recorded = change_events(recorded_deletes, layout, shape, generation).join(
            arriving.select(*keys).distinct(), on=keys, how="left_semi"
        )
        arriving = arriving.unionByName(_not_held(recorded, stored.unionByName(arriving), keys))
    events = stored.unionByName(arriving)
    return _staged(current, folded_versions(events, layout, shape), layout, shape)


def _not_held(events: DataFrame, held: DataFrame, keys: list[str]) -> DataFrame:
    """`events` but those whose key holds an event of the same kind and sequence value in
    `held`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    known = held.select(
        *(F.col(quote_ident(k)).alias(f"_k_{k}") for k in keys),
        F.col(EVENT)[EVENT_SEQUENCE].alias("_ks"),
        F.col(EVENT)[EVENT_KIND].alias("_kk"),
    )
    condition = [F.col(quote_ident(k)) == F.col(f"_k_{k}") for k in keys] + [
        F.col(EVENT)[EVENT_SEQUENCE] == F.col("_ks"),
        F.col(EVENT)[EVENT_KIND] == F.col("_kk"),
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
    shape = HistoryShape.of(silver.schema)
    keys = list(layout.keys)
    stored = stored_events(silver, layout)
    observed = snapshot.select(
        *(F.col(quote_ident(k)) for k in keys),
        event_struct(
            F.col(quote_ident(layout.sequence_by)).cast(shape.sequence_type),
            generation,
            F.lit(version),
            F.lit("update"),
            row_values(snapshot, shape),
        ),
    )
    fresh = _unknown(observed, stored, layout, shape)
    last = stored.groupBy(*keys).agg(F.max_by(F.col(EVENT), event_order()).alias(EVENT))
    gone = (
        last.filter(F.col(EVENT)[EVENT_KIND] != "delete")
        .join(snapshot.select(*keys), on=keys, how="left_anti")
        .select(
            *keys,
            event_struct(
                F.col(EVENT)[EVENT_SEQUENCE],
                generation,
                F.lit(version),
                F.lit("delete"),
                F.col(EVENT)[EVENT_VALUES],
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
    events = stored_events(current, layout).unionByName(arriving)
    return _staged(current, folded_versions(events, layout, shape), layout, shape)


def _unknown(
    observed: DataFrame, stored: DataFrame, layout: SilverLayout, shape: HistoryShape
) -> DataFrame:
    """The snapshot's events whose key holds no non-delete event with the same sequence value
    and the same values already (on the columns bronze still has: the snapshot holds nothing
    in a retired one, and a closed version keeps what it held)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    def same(frame: DataFrame, alias: str) -> DataFrame:
        values = F.struct(
            *(
                F.expr(shape.comparable(c, f"{EVENT}.{EVENT_VALUES}.{quote_ident(c)}")).alias(c)
                for c in layout.value_columns
            )
        )
        return frame.select(
            *(F.col(quote_ident(k)).alias(f"{alias}{k}") for k in layout.keys),
            F.col(EVENT)[EVENT_SEQUENCE].alias(f"{alias}s"),
            values.alias(f"{alias}v"),
            *((F.col(EVENT).alias(EVENT),) if alias == "o_" else ()),
        )

    known = same(stored.filter(F.col(EVENT)[EVENT_KIND] != "delete"), "k_")
    candidates = same(observed, "o_")
    condition = [F.col(f"o_{k}") == F.col(f"k_{k}") for k in layout.keys] + [
        F.col("o_s") == F.col("k_s"),
        F.col("o_v").eqNullSafe(F.col("k_v")),
    ]
    fresh = candidates.join(known, on=condition, how="left_anti")
    return fresh.select(*(F.col(f"o_{k}").alias(k) for k in layout.keys), F.col(EVENT))


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
