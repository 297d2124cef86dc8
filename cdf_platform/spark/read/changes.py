"""Collapse of a change feed read to one change per key, after checking its keys.

The rows come from a pinned read (`cdf_platform.spark.read.change_feed`); the collapse keeps each
key's latest change (with `sequence_by`: the newest sequence value), or each key's change of
every commit for history, and refuses a range with a null key, a duplicate key in one commit
or a NULL sequence value. The key-quality checks are shared with the snapshot MERGE.

Example:
    >>> collapsed = collapse_changes(frame, ["order_id"], data_columns, ctx)  # doctest: +SKIP
    >>> collapsed.release()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import DataQualityError
from cdf_platform.core.spec.modes import HistoryMode
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import quote_ident
from cdf_platform.spark.read.change_feed import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    ReadContext,
    classified,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Row

# Priority of a change inside one commit: an overwrite, replaceWhere or RESTORE writes a delete and
# an insert of the same key in one commit, and the row exists after that commit.
_SURVIVOR_PRIORITY = 2
_FILTERED_PRIORITY = 1
_DELETE_PRIORITY = 0
_PRIORITY = "_priority"
_SEQUENCE = "_sequence"
_UNKNOWN_OPERATION = "_unknown_operation"
FILTERED = "filtered"
"""The change type `where` gives a row image it drops (`cdf_platform.spark.quality.conform`): a
delete of its key, dated by the dropped row, which the collapse reads as `delete`."""
UNKNOWN = "unknown:"
"""The prefix of the change type an event with an unknown operation value gets
(`cdf_platform.spark.reconcile.event_source`): `unknown:<value>`, refused by the collapse."""


@dataclass(frozen=True)
class CollapsedChanges:
    """One change per key: the latest one in the range, as a DataFrame with `_change_type`,
    `_commit_version` and `_commit_timestamp` next to the data columns (and `_reset` when null
    updates are ignored: see `collapse_changes`)."""

    frame: DataFrame
    data_columns: list[str]
    cached: DataFrame

    def release(self) -> None:
        """Drop the cached per-commit aggregate."""
        self.cached.unpersist()


@dataclass(frozen=True)
class ChangeOrder:
    """How a key's changes are ordered and merged (the spec's `sequence_by`,
    `ignore_null_updates`).

    Attributes:
        sequence_by: A data column that orders changes before the commit version does.
        ignore_null_updates: A NULL in an update keeps the value before it.
        every_commit: Keep each key's change of every commit, not only the latest (history).
        events: The changes are events (`changes: events`): a commit may hold several of one
            key, told apart by their sequence values; two different ones with the same value,
            or one with an unknown operation, are refused.
    """

    sequence_by: str | None = None
    ignore_null_updates: bool = False
    every_commit: bool = False
    events: bool = False

    @classmethod
    def of(cls, spec: PipelineSpec) -> ChangeOrder:
        """The order `spec` asks for."""
        return cls(
            spec.sequence_by,
            spec.ignore_null_updates,
            spec.history is HistoryMode.SCD2,
            spec.changes.sequences_each_change,
        )


RESET = "_reset"


def collapse_changes(
    changes: DataFrame,
    keys: Sequence[str],
    data_columns: Sequence[str],
    ctx: ReadContext,
    order: ChangeOrder = ChangeOrder(),
) -> CollapsedChanges:
    """Collapse a change feed to the latest change per key, after checking key quality.

    Rules (docs/design.md section 5): an `update_preimage` row carries no values forward, but
    a key that appears in a commit's preimages and in none of its inserts or postimages has
    left the table (an UPDATE of a key column): it counts as a delete of that key; the change
    with the highest `_commit_version` wins (with `sequence_by`: the highest sequence value,
    then version); inside one commit an insert/postimage beats a delete of the same key. Rows
    are ordered on the change priority, sequence and version only, never on value columns (a
    MAP or a VARIANT has no ordering): the winning row is carried along. With
    `ignore_null_updates`, each value column takes the last non-NULL value since the key's last
    insert or delete in the range, and `_reset` says whether there was one (else silver's value
    stands in for a column that only NULLs updated). With `every_commit` (SCD2), each key's
    change of every commit is kept, one row per (key, version). The per-(key, version) aggregate
    is cached,
    so the feed is read once for both the checks and the MERGE; the caller must `release` it.

    Raises:
        DataQualityError: a null key, two surviving rows for one key in one commit, or a NULL
            `sequence_by` value.
        ReplayWindowLost, ...: the read failed while running (classified).
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    original = F.col(CHANGE_TYPE)
    # Inside one commit, the row the commit left wins: an insert/postimage, else a row `where`
    # dropped (the new row's image dates the delete), else a delete or preimage (the old one).
    priority = (
        F.when(original == "delete", F.lit(_DELETE_PRIORITY))
        .when(original == "update_preimage", F.lit(_DELETE_PRIORITY))
        .when(original == FILTERED, F.lit(_FILTERED_PRIORITY))
        .otherwise(F.lit(_SURVIVOR_PRIORITY))
    )
    payload = [*(c for c in data_columns if c not in keys), CHANGE_TYPE, COMMIT_TIMESTAMP]
    # A preimage's key left the table unless the same commit also writes it (then the
    # insert/postimage wins on priority): as a delete, it removes a key an UPDATE renamed.
    relevant = changes.withColumn(_PRIORITY, priority).withColumn(
        CHANGE_TYPE,
        F.when(original.isin("update_preimage", FILTERED), F.lit("delete")).otherwise(original),
    )
    key_cols = [F.col(quote_ident(k)) for k in keys]
    carried = F.struct(*(F.col(quote_ident(c)) for c in payload))
    unit = [*key_cols, F.col(COMMIT_VERSION)]
    checks = [
        F.count_if(F.col(CHANGE_TYPE) != "delete").alias("_survivors"),
        null_sequence_count(order.sequence_by).alias("_null_sequence"),
    ]
    if order.events:
        assert order.sequence_by is not None
        unit.append(F.col(quote_ident(order.sequence_by)).alias(_SEQUENCE))
        # The same event delivered twice is one event; two different ones tie.
        checks = [
            F.count_distinct(F.to_json(carried)).alias("_survivors"),
            *checks[1:],
            F.max(F.when(F.col(CHANGE_TYPE).startswith(UNKNOWN), F.col(CHANGE_TYPE))).alias(
                _UNKNOWN_OPERATION
            ),
        ]
    per_commit = (
        relevant.groupBy(*unit)
        .agg(*checks, F.max_by(carried, F.col(_PRIORITY)).alias("_row"))
        .persist()
    )
    _refuse_bad_rows(per_commit, keys, order, ctx)
    ordering = [F.col(f"_row.{quote_ident(order.sequence_by)}")] if order.sequence_by else []
    ordered = per_commit.withColumn("_order", F.struct(*ordering, F.col(COMMIT_VERSION)))
    if order.every_commit:
        frame = ordered.select(
            *key_cols,
            *(F.col(f"_row.{quote_ident(c)}").alias(c) for c in payload),
            F.col(COMMIT_VERSION),
        )
    elif order.ignore_null_updates:
        frame = _collapse_ignoring_nulls(ordered, keys, payload, order.sequence_by)
    else:
        latest = ordered.groupBy(*key_cols).agg(_latest_change().alias("_latest"))
        frame = latest.select(
            *key_cols,
            *(F.col(f"_latest._row.{quote_ident(c)}").alias(c) for c in payload),
            F.col(f"_latest.{COMMIT_VERSION}").alias(COMMIT_VERSION),
        )
    return CollapsedChanges(frame=frame, data_columns=list(data_columns), cached=per_commit)


def _latest_change() -> Column:
    """An aggregate over a key's per-commit rows: the latest one's version and row, chosen by
    `_order` (sequence value, then version: unique per key) alone."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return F.max_by(F.struct(COMMIT_VERSION, "_row"), F.col("_order"))


def _refuse_bad_rows(
    per_commit: DataFrame, keys: Sequence[str], order: ChangeOrder, ctx: ReadContext
) -> None:
    """Raise DataQualityError for the first null key, duplicate key or NULL sequence value."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    key_cols = [F.col(quote_ident(k)) for k in keys]
    bad = null_key(keys) | (F.col("_survivors") > 1) | (F.col("_null_sequence") > 0)
    shown = [*key_cols, F.col(COMMIT_VERSION), F.col("_survivors"), F.col("_null_sequence")]
    if order.events:
        bad = bad | F.col(_UNKNOWN_OPERATION).isNotNull()
        shown += [F.col(_SEQUENCE), F.col(_UNKNOWN_OPERATION)]
    problems = classified(
        ctx,
        lambda: per_commit.filter(bad).select(*shown).orderBy(COMMIT_VERSION).limit(5).collect(),
    )
    if not problems:
        return
    per_commit.unpersist()
    first = problems[0]
    version = int(first[COMMIT_VERSION])
    where = f"bronze commit {version}"
    action = None
    if order.events:
        problem, action = _event_problem(first, keys, where, order.sequence_by)
    else:
        problem = key_quality_problem(first, keys, where, first["_survivors"], order.sequence_by)
    raise DataQualityError(
        problem, pipeline_id=ctx.pipeline_id, table=ctx.table, version=version, action=action
    )


def _event_problem(
    row: Row, keys: Sequence[str], where: str, sequence_by: str | None
) -> tuple[str, str | None]:
    """What is wrong with the first offending event of `where`, and what to do (None: the
    class's action): an unknown operation value, two different events of one key with the same
    sequence value, or a null key or sequence."""
    key_text = ", ".join(f"{k}={row[k]!r}" for k in keys)
    unknown = row[_UNKNOWN_OPERATION]
    if unknown is not None and not any(row[k] is None for k in keys):
        value = unknown.removeprefix(UNKNOWN)
        return (
            f"{where} holds an event of key ({key_text}) whose operation {value} is in no "
            "list of `events` (upserts, deletes, truncates)",
            "add the operation value to `events.upserts`, `events.deletes` or "
            "`events.truncates` in the pipelines file (or correct the event in bronze), then "
            "rerun",
        )
    if row["_survivors"] > 1 and not any(row[k] is None for k in keys):
        return (
            f"{where} holds {row['_survivors']} different events of key ({key_text}) with the "
            f"same sequence_by value ({sequence_by}={row[_SEQUENCE]!r}): their order is unknown",
            "remove or correct one of the events in bronze, or give `sequence_by` a column "
            "that tells them apart, then rerun",
        )
    return key_quality_problem(row, keys, where, 1, sequence_by), None


def null_key(keys: Sequence[str]) -> Column:
    """True on a row with a NULL in any key column."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    found = F.lit(False)
    for key in keys:
        found = found | F.col(quote_ident(key)).isNull()
    return found


def null_sequence_count(sequence_by: str | None) -> Column:
    """An aggregate: the rows of a group whose `sequence_by` value is NULL (0 without one)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    if sequence_by is None:
        return F.lit(0)
    return F.count_if(F.col(quote_ident(sequence_by)).isNull())


def key_quality_problem(
    row: Row | Mapping[str, Any],
    keys: Sequence[str],
    where: str,
    rows: int,
    sequence_by: str | None,
) -> str:
    """What is wrong with the first offending key of `where` (a commit or a snapshot): a null
    key, `rows` rows for one key, or a NULL `sequence_by` value."""
    key_text = ", ".join(f"{k}={row[k]!r}" for k in keys)
    if any(row[k] is None for k in keys):
        return f"{where} has a row with a null key ({key_text})"
    if rows > 1:
        return f"{where} holds {rows} rows for key ({key_text}): the source has duplicate keys"
    return f"{where} has a NULL sequence_by value ({sequence_by}) for key ({key_text})"


def _collapse_ignoring_nulls(
    ordered: DataFrame, keys: Sequence[str], payload: Sequence[str], sequence_by: str | None
) -> DataFrame:
    """Per key: the latest change's type, timestamp, version and `sequence_by` value, each
    other value column's last non-NULL value since the key's last insert or delete, and
    `_reset` (there was one).

    The sequence value is the latest change's own, whatever its type: it orders the change
    against silver's row, and a delete (whose values are not carried) must still be newer
    than the row it removes."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    key_cols = [F.col(quote_ident(k)) for k in keys]
    row_type = F.col(f"_row.{CHANGE_TYPE}")
    restarts = F.when(row_type.isin("insert", "delete"), F.col("_order"))
    with_reset = ordered.withColumn("_reset_at", F.max(restarts).over(Window.partitionBy(*keys)))
    in_segment = F.col("_reset_at").isNull() | (F.col("_order") >= F.col("_reset_at"))
    values = [c for c in payload if c not in (CHANGE_TYPE, COMMIT_TIMESTAMP)]
    aggregates = [
        _latest_change().alias("_latest"),
        F.max(F.col("_reset_at").isNotNull()).alias(RESET),
    ]
    for column in values:
        value = F.col(f"_row.{quote_ident(column)}")
        if column == sequence_by:
            continue
        usable = in_segment & value.isNotNull() & (row_type != "delete")
        aggregates.append(F.max_by(value, F.when(usable, F.col("_order"))).alias(column))
    latest = with_reset.groupBy(*key_cols).agg(*aggregates)
    return latest.select(
        *key_cols,
        *(
            F.col(f"_latest._row.{quote_ident(c)}").alias(c)
            if c == sequence_by
            else F.col(quote_ident(c))
            for c in values
        ),
        F.col(f"_latest._row.{CHANGE_TYPE}").alias(CHANGE_TYPE),
        F.col(f"_latest._row.{COMMIT_TIMESTAMP}").alias(COMMIT_TIMESTAMP),
        F.col(f"_latest.{COMMIT_VERSION}").alias(COMMIT_VERSION),
        F.col(RESET),
    )
