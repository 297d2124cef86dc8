"""Writing silver: the incremental MERGE of a collapsed change set and the reconcile MERGE of a
pinned snapshot (the table itself: `cdf_platform.spark.table.silver_table`). Every data write
carries the watermark as a Delta idempotent-write transaction in the same commit.

Example:
    >>> stamp = TxnStamp(app_id="orders", version=57, metadata="{...}")
    >>> merge_changes(spark, target, collapsed, layout, stamp, silver_filter)  # doctest: +SKIP
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from cdf_platform.core.errors import DataQualityError
from cdf_platform.core.sql import quote_ident, sql_string
from cdf_platform.core.storage import StorageConfig
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from cdf_platform.spark.read.changes import (
    RESET,
    CollapsedChanges,
    key_quality_problem,
    null_key,
    null_sequence_count,
)
from cdf_platform.spark.table.silver_layout import (
    SOURCE_VERSION,
    SilverLayout,
)
from cdf_platform.spark.write.key_filter import key_filter
from cdf_platform.spark.write.merge_sql import (
    SOURCE_VIEW,
    insert_values,
    merge_statement,
    update_set,
    when_matched,
    when_not_matched,
)
from cdf_platform.spark.write.silver_deletes import deletes_of

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")

TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
_NULL_TIMESTAMP = "CAST(NULL AS TIMESTAMP)"


@dataclass(frozen=True)
class TxnStamp:
    """The idempotent-write transaction (and commit metadata) a silver write carries."""

    app_id: str
    version: int
    metadata: str


# The attribute of a session object that holds its stamp lock.
_STAMP_LOCK = "_cdf_platform_stamp_lock"


def _session_lock(spark: SparkSession) -> threading.Lock:
    """The lock of `spark`'s stamps, kept by the session object itself (made at its first
    stamped write): the stamp is session state, so two threads writing through one session
    (every write over Spark Connect shares the client's session) must not interleave between
    setting the confs and the write that reads them. A session from `newSession()` is another
    object with its own confs and its own lock; the lock goes with its session."""
    # dict.setdefault is atomic: two threads' first writes get the same lock.
    return vars(spark).setdefault(_STAMP_LOCK, threading.Lock())


@contextmanager
def stamped(spark: SparkSession, stamp: TxnStamp) -> Iterator[None]:
    """Session confs that make the next Delta write carry `stamp`, unset afterwards; held under
    the session's lock, so a write of another thread through the same session cannot carry
    this stamp, nor this write another's.

    Delta applies txnAppId/txnVersion to every write made while they are set, and skips a write
    whose version is not above the stored one: leaving them set would silently skip the next
    write, so they are always unset.
    """
    with _session_lock(spark):
        spark.conf.set(TXN_APP_ID_CONF, stamp.app_id)
        spark.conf.set(TXN_VERSION_CONF, str(stamp.version))
        spark.conf.set(USER_METADATA_CONF, stamp.metadata)
        try:
            yield
        finally:
            for key in (TXN_APP_ID_CONF, TXN_VERSION_CONF, USER_METADATA_CONF):
                spark.conf.unset(key)


# -- the pieces of silver's MERGEs (assembled by `cdf_platform.spark.write.merge_sql`) ---------


def _values(layout: SilverLayout, *, reset: str | None) -> list[str]:
    """Each value column takes what an update writes (`SilverLayout.value`)."""
    return [f"{quote_ident(c)} = {layout.value(c, reset=reset)}" for c in layout.value_columns]


def _upsert(layout: SilverLayout, *, version: str, reset: str | None) -> list[str]:
    """The assignments of an update from `s`: values, the stamp, retired columns NULL, live
    (`SilverDeletes.live`)."""
    stamp = f"{SOURCE_VERSION} = {version}"
    live = deletes_of(layout).live()
    return [*_values(layout, reset=reset), stamp, *layout.retired_nulls(), *live]


def _new_row(layout: SilverLayout, version_expr: str) -> list[tuple[str, str]]:
    """(silver column, SQL value) of a row inserted from source `s`, stamped `version_expr`."""
    row = [(c, f"s.{quote_ident(c)}") for c in layout.data_columns]
    row.append((SOURCE_VERSION, version_expr))
    return [*row, *deletes_of(layout).new_row()]


def _insert(layout: SilverLayout, version_expr: str) -> str:
    """The INSERT of a row from source `s`, stamped `version_expr` (`_new_row`)."""
    row = _new_row(layout, version_expr)
    return insert_values([c for c, _ in row], [v for _, v in row])


@dataclass(frozen=True)
class Truncation:
    """An event log's truncate (`events.truncates`): every silver row whose `sequence_by` value
    is at or before `sequence` (a SQL literal of the column's type) leaves silver.

    Attributes:
        sequence: The truncate's sequence value, as a SQL literal.
        version: Its bronze commit version.
        at: Its bronze commit time (a soft delete's `_deleted_at`).
    """

    sequence: str
    version: int
    at: datetime

    def clause(self, layout: SilverLayout) -> str:
        """The MERGE clause deleting (or soft-deleting) the rows the changes do not reach."""
        assert layout.sequence_by is not None
        older = f"t.{quote_ident(layout.sequence_by)} <= {self.sequence}"
        at = f"CAST({sql_string(self.at.isoformat())} AS TIMESTAMP)"
        version = str(int(self.version))
        return deletes_of(layout).truncation(
            layout, older, at=at, version=version, sequence=self.sequence
        )


def merge_changes_sql(
    target: str,
    layout: SilverLayout,
    silver_filter: str | None = None,
    *,
    quiet: bool = False,
    truncation: Truncation | None = None,
) -> str:
    """The incremental MERGE of a collapsed change set (view `cdf_platform_source`) into silver.

    A change only applies over an older silver row (`_commit_version` strictly greater, or a
    greater `sequence_by` value), so a replayed or out-of-order change set can never move a row
    backwards. `silver_filter` (`cdf_platform.spark.write.key_filter`) is a condition on silver's
    keys that every matched row satisfies: it joins the ON clause so Delta skips files. With `quiet`
    (a fold of the events bronze still holds, which silver took before), an update that would
    leave a live row as it is, and a delete of a row already deleted, write nothing. A
    `truncation` also removes every row no change reaches that it is not older than.
    """
    on = layout.on_clause() + (f" AND {silver_filter}" if silver_filter is not None else "")
    version = f"s.{COMMIT_VERSION}"
    newer = layout.newer(version)
    is_delete = f"s.{CHANGE_TYPE} = 'delete'"
    reset = f"s.{RESET}" if layout.ignore_null_updates else None
    deleting = deletes_of(layout)
    # An event's delete carries its own sequence value; a change feed's, the deleted row's.
    deleted = deleting.removal(
        layout, at=f"s.{COMMIT_TIMESTAMP}", version=version, sequence=layout.delete_sequence
    )
    deletes, updates = newer, newer
    if quiet:
        deletes, updates = deleting.quiet(newer, layout.unchanged(reset=reset))
    clauses = [
        when_matched(f"{is_delete} AND {deletes}", deleted),
        when_matched(
            f"NOT {is_delete} AND {updates}",
            update_set(_upsert(layout, version=version, reset=reset)),
        ),
        when_not_matched(f"NOT {is_delete}", _insert(layout, version)),
    ]
    if truncation is not None:
        clauses.append(truncation.clause(layout))
    return merge_statement(target, on, clauses)


def reconcile_sql(target: str, layout: SilverLayout, version: int, deleted_at: datetime) -> str:
    """The rebuild MERGE of a bronze snapshot (view `cdf_platform_source`) into silver.

    Inserts missing keys, updates rows whose values differ, deletes (or soft-deletes) rows whose
    key is gone. Rows already equal are not rewritten, so silver's own change feed shows only
    real differences. Rows stamped with a version above the snapshot's (a reset source) are
    re-stamped so later changes are not refused as older. With `sequence_by`, a silver row whose
    sequence value is later than the snapshot's is kept; with `ignore_null_updates`, a NULL in
    the snapshot keeps a live silver row's value, as the incremental runs do.
    """
    stamp = str(int(version))
    restamp = f"t.{SOURCE_VERSION} > {stamp}"
    deleting = deletes_of(layout)
    differs = f"NOT ({layout.unchanged()}) OR {restamp} OR {layout.holds_retired_value()}"
    differs = deleting.reconcile_differs(differs)
    if layout.sequence_by is not None:
        # A silver row with a later sequence value than the snapshot's came from a change that
        # bronze itself overwrote with an older one: the incremental runs kept it, so does this
        # (unless the row is stamped past the snapshot: a reset source is mirrored as it is).
        seq = quote_ident(layout.sequence_by)
        differs = f"({differs}) AND (NOT coalesce(t.{seq} > s.{seq}, false) OR {restamp})"
    clauses = [
        when_matched(f"({differs})", update_set(_upsert(layout, version=stamp, reset=None))),
        when_not_matched(None, _insert(layout, stamp)),
    ]
    at = f"CAST({sql_string(deleted_at.isoformat())} AS TIMESTAMP)"
    clauses.append(deleting.reconcile_gone(layout, stamp=stamp, at=at, restamp=restamp))
    return merge_statement(target, layout.on_clause(), clauses)


def with_source_view(spark: SparkSession, frame: DataFrame, action: Callable[[], T]) -> T:
    """`action()` with `frame` registered as the view `cdf_platform_source` (dropped after)."""
    frame.createOrReplaceTempView(SOURCE_VIEW)
    try:
        return action()
    finally:
        spark.catalog.dropTempView(SOURCE_VIEW)


def run_merge(spark: SparkSession, source: DataFrame, sql: str, stamp: TxnStamp) -> None:
    """Run MERGE `sql` over `source` (as view `cdf_platform_source`), stamped with `stamp`."""
    with stamped(spark, stamp):
        with_source_view(spark, source, lambda: spark.sql(sql).collect())


def merge_changes(
    spark: SparkSession,
    target: str,
    collapsed: CollapsedChanges,
    layout: SilverLayout,
    stamp: TxnStamp,
    silver_filter: str | None,
    *,
    quiet: bool = False,
    truncation: Truncation | None = None,
) -> None:
    """Apply a collapsed change set to silver; the commit carries `stamp` (the watermark).
    `silver_filter` is the condition on silver's rows the changes can reach
    (`changes_key_filter`), or None; `quiet`, `truncation`: see `merge_changes_sql`."""
    sql = merge_changes_sql(target, layout, silver_filter, quiet=quiet, truncation=truncation)
    run_merge(spark, collapsed.frame, sql, stamp)


def changes_key_filter(
    spark: SparkSession,
    target: str,
    collapsed: CollapsedChanges,
    layout: SilverLayout,
    storage: StorageConfig,
) -> str | None:
    """The key filter of `collapsed` on silver (`cdf_platform.spark.write.key_filter`), computed
    from the cached per-commit change rows: the same keys as the collapsed set, without another
    shuffle. `storage`: the lake's object-store options (silver's log is read with them)."""
    return key_filter(spark, target, collapsed.cached, layout.keys, storage=storage)


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
    spark: SparkSession,
    target: str,
    snapshot: DataFrame,
    layout: SilverLayout,
    stamp: TxnStamp,
    *,
    replace: bool = False,
) -> None:
    """Write the bronze snapshot at `stamp.version` into a silver that holds no file yet: what
    the reconcile MERGE would insert, as one append stamped with the watermark. With `replace`
    the rows replace silver's, its schema included, in one commit: silver rewritten in a new
    shape (other keys, delete mode or history), which its readers see as every old row deleted
    and every new one inserted.

    The rows are written sorted by key, so each file holds one key range and its min/max
    statistics let the incremental MERGE skip the files a backlog does not reach
    (`cdf_platform.spark.write.key_filter`); `spark.sql.files.maxRecordsPerFile` caps a file's rows.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    # The row the reconcile MERGE would insert (`_insert`), its version typed as silver's column.
    row = _new_row(layout, f"CAST({int(stamp.version)} AS BIGINT)")
    columns = snapshot.alias("s").selectExpr(*(f"{v} AS {quote_ident(c)}" for c, v in row))
    rows = columns.orderBy(*(F.col(quote_ident(k)) for k in layout.keys))
    writer = rows.write.format("delta")
    if replace:
        writer = writer.mode("overwrite").option("overwriteSchema", "true")
    else:
        writer = writer.mode("append")
    with stamped(spark, stamp):
        writer.save(target)


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
