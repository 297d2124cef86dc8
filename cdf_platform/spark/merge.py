"""Writing silver: the incremental MERGE of a collapsed change set and the reconcile MERGE of a
pinned snapshot (the table itself: `cdf_platform.spark.silver_table`). Every data write carries
the watermark as a Delta idempotent-write transaction in the same commit.

Example:
    >>> stamp = TxnStamp(app_id="orders", version=57, metadata="{...}")
    >>> merge_changes(spark, target, collapsed, layout, stamp)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from cdf_platform.core.errors import DataQualityError
from cdf_platform.core.spec import DeleteMode, HistoryMode, PipelineSpec
from cdf_platform.core.sql import quote_ident, sql_path, sql_string
from cdf_platform.spark.changes import (
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    RESET,
    CollapsedChanges,
    key_quality_problem,
    null_key,
    null_sequence_count,
)
from cdf_platform.spark.key_filter import key_filter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")

# Delta reserves `_commit_version` for silver's own change feed (DELTA_TABLE_ALREADY_CONTAINS_CDC_
# COLUMNS), so the bronze version that produced a silver row is kept under this name.
SOURCE_VERSION = "_source_commit_version"
IS_DELETED = "_is_deleted"
DELETED_AT = "_deleted_at"
# SCD2 silver (`cdf_platform.spark.history`): when a version opened and closed (NULL: current).
START_AT = "__start_at"
END_AT = "__end_at"
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
SOURCE_VIEW = "cdf_platform_source"


@dataclass(frozen=True)
class SilverLayout:
    """The shape of a silver table: data columns (keys first) and the delete mode.

    `retired_columns` are silver columns bronze no longer has (dropped or renamed there): a
    rebuild sets them to NULL, since silver mirrors bronze, where they hold nothing.
    `deletion_vectors` applies when silver is created: a MERGE then marks the rows it replaces
    in a deletion vector instead of copying every other row of the files they sit in.
    `sequence_by` and `ignore_null_updates` are the spec's (`cdf_platform.spark.changes.
    ChangeOrder`): which change is newer, and whether a NULL update keeps silver's value.
    `history` and `tracked` (SCD2: the value columns whose change opens a version) are too.
    """

    keys: list[str]
    data_columns: list[str]
    delete_mode: DeleteMode
    retired_columns: tuple[str, ...] = ()
    deletion_vectors: bool = True
    sequence_by: str | None = None
    ignore_null_updates: bool = False
    history: HistoryMode = HistoryMode.SCD1
    tracked: tuple[str, ...] = ()

    @property
    def value_columns(self) -> list[str]:
        """Data columns that are not keys."""
        return [c for c in self.data_columns if c not in self.keys]

    @classmethod
    def of(cls, spec: PipelineSpec, data_columns: Sequence[str]) -> SilverLayout:
        """The layout of `spec`'s silver with `data_columns` (keys first)."""
        value_columns = [c for c in data_columns if c not in spec.keys]
        return cls(
            list(spec.keys),
            list(data_columns),
            spec.delete_mode,
            deletion_vectors=spec.deletion_vectors,
            sequence_by=spec.sequence_by,
            ignore_null_updates=spec.ignore_null_updates,
            history=spec.history,
            tracked=tuple(spec.tracked_columns(value_columns)),
        )

    def newer(self, version: str) -> str:
        """SQL: the source row `s` (of bronze version `version`) is newer than silver's `t`."""
        by_version = f"{version} > t.{SOURCE_VERSION}"
        if self.sequence_by is None:
            return by_version
        seq = quote_ident(self.sequence_by)
        return f"(s.{seq} > t.{seq} OR t.{seq} IS NULL OR (s.{seq} = t.{seq} AND {by_version}))"

    def value(self, column: str, *, reset: str | None) -> str:
        """SQL: the value an update writes to `column` (NULLs keep silver's value when asked;
        `reset`, a condition under which the source row's value stands as it is)."""
        source = f"s.{quote_ident(column)}"
        if not self.ignore_null_updates:
            return source
        kept = f"coalesce({source}, t.{quote_ident(column)})"
        return f"CASE WHEN {reset} THEN {source} ELSE {kept} END" if reset else kept

    def unchanged(self) -> str:
        """SQL: every value column of `t` already holds what an update from `s` would write."""
        if not self.value_columns:
            return "TRUE"
        return " AND ".join(
            f"t.{quote_ident(c)} <=> {self.value(c, reset=None)}" for c in self.value_columns
        )

    def on_clause(self) -> str:
        """MERGE condition on the keys (keys are never null: checked before)."""
        return " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in self.keys)


@dataclass(frozen=True)
class TxnStamp:
    """The idempotent-write transaction (and commit metadata) a silver write carries."""

    app_id: str
    version: int
    metadata: str


@contextmanager
def stamped(spark: SparkSession, stamp: TxnStamp) -> Iterator[None]:
    """Session confs that make the next Delta write carry `stamp`, unset afterwards.

    Delta applies txnAppId/txnVersion to every write made while they are set, and skips a write
    whose version is not above the stored one: leaving them set would silently skip the next
    write, so they are always unset.
    """
    spark.conf.set(TXN_APP_ID_CONF, stamp.app_id)
    spark.conf.set(TXN_VERSION_CONF, str(stamp.version))
    spark.conf.set(USER_METADATA_CONF, stamp.metadata)
    try:
        yield
    finally:
        for key in (TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF):
            spark.conf.unset(key)


def _assignments(layout: SilverLayout, *, reset: str | None) -> list[str]:
    return [f"{quote_ident(c)} = {layout.value(c, reset=reset)}" for c in layout.value_columns]


def _retired_nulls(layout: SilverLayout) -> list[str]:
    """Assignments that keep the retired columns NULL: every write that touches a row sets them,
    so no path (an upsert over a soft-deleted row, a re-insert) can bring an old value back."""
    return [f"{quote_ident(c)} = NULL" for c in layout.retired_columns]


def _any_retired_value(layout: SilverLayout) -> str:
    """A condition true on a row that still holds a value in a retired column."""
    return "".join(f" OR t.{quote_ident(c)} IS NOT NULL" for c in layout.retired_columns)


def _new_row(layout: SilverLayout, version_expr: str) -> list[tuple[str, str]]:
    """(silver column, SQL value) of a row inserted from source `s`, stamped `version_expr`."""
    row = [(c, f"s.{quote_ident(c)}") for c in layout.data_columns]
    row.append((SOURCE_VERSION, version_expr))
    if layout.delete_mode is DeleteMode.SOFT:
        row += [(IS_DELETED, "false"), (DELETED_AT, "CAST(NULL AS TIMESTAMP)")]
    return row


def _insert(layout: SilverLayout, version_expr: str) -> str:
    row = _new_row(layout, version_expr)
    names = ", ".join(quote_ident(c) for c, _ in row)
    return f"INSERT ({names}) VALUES ({', '.join(v for _, v in row)})"


def merge_changes_sql(target: str, layout: SilverLayout, silver_filter: str | None = None) -> str:
    """The incremental MERGE of a collapsed change set (view `cdf_platform_source`) into silver.

    A change only applies over an older silver row (`_commit_version` strictly greater, or a
    greater `sequence_by` value), so a replayed or out-of-order change set can never move a row
    backwards. `silver_filter` (`cdf_platform.spark.key_filter`) is a condition on silver's keys
    that every matched row satisfies: it joins the ON clause so Delta skips files.
    """
    on = layout.on_clause()
    if silver_filter is not None:
        on = f"{on} AND {silver_filter}"
    newer = layout.newer(f"s.{COMMIT_VERSION}")
    insert = _insert(layout, "s." + COMMIT_VERSION)
    retired = _retired_nulls(layout)
    upsert = [*_assignments(layout, reset=f"s.{RESET}"), f"{SOURCE_VERSION} = s.{COMMIT_VERSION}"]
    upsert += retired
    if layout.delete_mode is DeleteMode.SOFT:
        upsert += [f"{IS_DELETED} = false", f"{DELETED_AT} = CAST(NULL AS TIMESTAMP)"]
        soft_delete = [
            f"{IS_DELETED} = true",
            f"{DELETED_AT} = s.{COMMIT_TIMESTAMP}",
            f"{SOURCE_VERSION} = s.{COMMIT_VERSION}",
            *retired,
        ]
        on_delete = f"UPDATE SET {', '.join(soft_delete)}"
    else:
        on_delete = "DELETE"
    return f"""
        MERGE INTO {sql_path(target)} AS t
        USING {SOURCE_VIEW} AS s
        ON {on}
        WHEN MATCHED AND s._change_type = 'delete' AND {newer} THEN {on_delete}
        WHEN MATCHED AND s._change_type != 'delete' AND {newer} THEN UPDATE SET {", ".join(upsert)}
        WHEN NOT MATCHED AND s._change_type != 'delete' THEN {insert}
    """


def reconcile_sql(target: str, layout: SilverLayout, version: int, deleted_at: datetime) -> str:
    """The rebuild MERGE of a bronze snapshot (view `cdf_platform_source`) into silver.

    Inserts missing keys, updates rows whose values differ, deletes (or soft-deletes) rows whose
    key is gone. Rows already equal are not rewritten, so silver's own change feed shows only
    real differences. Rows stamped with a version above the snapshot's (a reset source) are
    re-stamped so later changes are not refused as older. With `sequence_by`, a silver row whose
    sequence value is later than the snapshot's is kept; with `ignore_null_updates`, a NULL in
    the snapshot keeps silver's value, as the incremental runs do.
    """
    stamp = str(int(version))
    retired = _retired_nulls(layout)
    differs = f"NOT ({layout.unchanged()}) OR t.{SOURCE_VERSION} > {stamp}"
    differs += _any_retired_value(layout)
    update = [*_assignments(layout, reset=None), f"{SOURCE_VERSION} = {stamp}", *retired]
    at = f"CAST({sql_string(deleted_at.isoformat())} AS TIMESTAMP)"
    if layout.delete_mode is DeleteMode.SOFT:
        differs = f"t.{IS_DELETED} OR {differs}"
        update += [f"{IS_DELETED} = false", f"{DELETED_AT} = CAST(NULL AS TIMESTAMP)"]
        # Rows already soft-deleted are rewritten too while a retired column holds a value:
        # a later re-insert of the key would otherwise bring that value back.
        stale = f"NOT t.{IS_DELETED} OR t.{SOURCE_VERSION} > {stamp}{_any_retired_value(layout)}"
        soft_delete = [
            f"{IS_DELETED} = true",
            f"{DELETED_AT} = CASE WHEN t.{IS_DELETED} THEN t.{DELETED_AT} ELSE {at} END",
            f"{SOURCE_VERSION} = {stamp}",
            *retired,
        ]
        gone = f"WHEN NOT MATCHED BY SOURCE AND ({stale}) THEN UPDATE SET {', '.join(soft_delete)}"
    else:
        gone = "WHEN NOT MATCHED BY SOURCE THEN DELETE"
    if layout.sequence_by is not None:
        # A silver row with a later sequence value than the snapshot's came from a change that
        # bronze itself overwrote with an older one: the incremental runs kept it, so does this
        # (unless the row is stamped past the snapshot: a reset source is mirrored as it is).
        seq = quote_ident(layout.sequence_by)
        newer_in_silver = f"coalesce(t.{seq} > s.{seq}, false)"
        differs = f"({differs}) AND (NOT {newer_in_silver} OR t.{SOURCE_VERSION} > {stamp})"
    return f"""
        MERGE INTO {sql_path(target)} AS t
        USING {SOURCE_VIEW} AS s
        ON {layout.on_clause()}
        WHEN MATCHED AND ({differs}) THEN UPDATE SET {", ".join(update)}
        WHEN NOT MATCHED THEN {_insert(layout, stamp)}
        {gone}
    """


def _with_source_view(spark: SparkSession, frame: DataFrame, action: Callable[[], T]) -> T:
    frame.createOrReplaceTempView(SOURCE_VIEW)
    try:
        return action()
    finally:
        spark.catalog.dropTempView(SOURCE_VIEW)


def run_merge(spark: SparkSession, source: DataFrame, sql: str, stamp: TxnStamp) -> None:
    """Run MERGE `sql` over `source` (as view `cdf_platform_source`), stamped with `stamp`."""
    with stamped(spark, stamp):
        _with_source_view(spark, source, lambda: spark.sql(sql).collect())


def merge_changes(
    spark: SparkSession,
    target: str,
    collapsed: CollapsedChanges,
    layout: SilverLayout,
    stamp: TxnStamp,
) -> None:
    """Apply a collapsed change set to silver; the commit carries `stamp` (the watermark)."""
    # The cached change rows hold the same keys as the collapsed set, without another shuffle.
    silver_filter = key_filter(spark, target, collapsed.cached, layout.keys)
    run_merge(spark, collapsed.frame, merge_changes_sql(target, layout, silver_filter), stamp)


def check_snapshot_keys(
    snapshot: DataFrame,
    keys: Sequence[str],
    *,
    pipeline_id: str,
    table: str,
    version: int,
    sequence_by: str | None = None,
) -> None:
    """Refuse a snapshot with a null key, a key held by two rows, or a NULL `sequence_by`.

    Raises:
        DataQualityError: naming the first offending key and the snapshot version.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    bad = (
        snapshot.groupBy(*(F.col(quote_ident(k)) for k in keys))
        .agg(
            F.count(F.lit(1)).alias("count"),
            null_sequence_count(sequence_by).alias("null_sequence"),
        )
        .filter(null_key(keys) | (F.col("count") > 1) | (F.col("null_sequence") > 0))
        .limit(1)
        .collect()
    )
    if bad:
        row = bad[0]
        where = f"bronze snapshot {version}"
        problem = key_quality_problem(row, keys, where, row["count"], sequence_by)
        raise DataQualityError(problem, pipeline_id=pipeline_id, table=table, version=version)


def load_snapshot(
    spark: SparkSession, target: str, snapshot: DataFrame, layout: SilverLayout, stamp: TxnStamp
) -> None:
    """Write the bronze snapshot at `stamp.version` into a silver that holds no file yet: what
    the reconcile MERGE would insert, as one append stamped with the watermark.

    The rows are written sorted by key, so each file holds one key range and its min/max
    statistics let the incremental MERGE skip the files a backlog does not reach
    (`cdf_platform.spark.key_filter`); `spark.sql.files.maxRecordsPerFile` caps a file's rows.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    # The row the reconcile MERGE would insert (`_insert`), its version typed as silver's column.
    row = _new_row(layout, f"CAST({int(stamp.version)} AS BIGINT)")
    columns = snapshot.alias("s").selectExpr(*(f"{v} AS {quote_ident(c)}" for c, v in row))
    rows = columns.orderBy(*(F.col(quote_ident(k)) for k in layout.keys))
    with stamped(spark, stamp):
        rows.write.format("delta").mode("append").save(target)


def reconcile_snapshot(
    spark: SparkSession,
    target: str,
    snapshot: DataFrame,
    layout: SilverLayout,
    stamp: TxnStamp,
    deleted_at: datetime,
) -> None:
    """Reconcile silver with the bronze snapshot at `stamp.version`, stamping that watermark."""
    run_merge(spark, snapshot, reconcile_sql(target, layout, stamp.version, deleted_at), stamp)
