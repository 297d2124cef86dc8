"""Writing silver: table creation and additive evolution, the incremental MERGE of a collapsed
change set, and the reconcile MERGE of a pinned snapshot. Every data write carries the watermark
as a Delta idempotent-write transaction in the same commit.

Example:
    >>> stamp = TxnStamp(app_id="orders", version=57, metadata="{...}")
    >>> merge_changes(spark, target, collapsed, layout, stamp)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from cdf_platform.core.errors import (
    DataQualityError,
    IncompatibleSchemaChange,
    TargetOwnershipConflict,
    foreign_files_at_target,
)
from cdf_platform.core.spec import DeleteMode
from cdf_platform.core.sql import create_table_sql, quote_ident, sql_path, sql_string
from cdf_platform.deltalog.tables import holds_foreign_files, is_delta_table
from cdf_platform.spark.changes import COMMIT_TIMESTAMP, COMMIT_VERSION, CollapsedChanges
from cdf_platform.spark.failures import failure_facts, is_conflict
from cdf_platform.state.watermark import OWNER_PROPERTY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

T = TypeVar("T")

# Delta reserves `_commit_version` for silver's own change feed (DELTA_TABLE_ALREADY_CONTAINS_CDC_
# COLUMNS), so the bronze version that produced a silver row is kept under this name.
SOURCE_VERSION = "_source_commit_version"
IS_DELETED = "_is_deleted"
DELETED_AT = "_deleted_at"
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"
SOURCE_VIEW = "cdf_platform_source"
# Delta's refusal to create a table in a folder that holds files but no commit yet.
NON_EMPTY_LOCATION = "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"
# How long a CREATE that lost a race waits for the winner's first commit to appear.
CREATE_RACE_WAIT_S = 10.0


@dataclass(frozen=True)
class SilverLayout:
    """The shape of a silver table: data columns (keys first) and the delete mode.

    `retired_columns` are silver columns bronze no longer has (dropped or renamed there): a
    rebuild sets them to NULL, since silver mirrors bronze, where they hold nothing.
    `deletion_vectors` applies when silver is created: a MERGE then marks the rows it replaces
    in a deletion vector instead of copying every other row of the files they sit in.
    """

    keys: list[str]
    data_columns: list[str]
    delete_mode: DeleteMode
    retired_columns: tuple[str, ...] = ()
    deletion_vectors: bool = True

    @property
    def value_columns(self) -> list[str]:
        """Data columns that are not keys."""
        return [c for c in self.data_columns if c not in self.keys]

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


def _silver_schema(source: StructType, layout: SilverLayout) -> dict[str, str]:
    by_name = {f.name: f.dataType.simpleString() for f in source.fields}
    columns = {c: by_name[c] for c in layout.data_columns}
    columns[SOURCE_VERSION] = "BIGINT"
    if layout.delete_mode is DeleteMode.SOFT:
        columns[IS_DELETED] = "BOOLEAN"
        columns[DELETED_AT] = "TIMESTAMP"
    return columns


def _existing_silver(target: str) -> tuple[str | None, dict[str, str]] | None:
    """Silver's owner property and column types (Spark type names), JVM-free; None if absent.

    Read through `deltalake` from the log: no Spark job, no DESCRIBE DETAIL.
    """
    if not is_delta_table(target):
        return None
    from deltalake import DeltaTable
    from pyspark.sql.types import StructType  # pure Python: parses the log's schema JSON

    table = DeltaTable(target)
    owner = table.metadata().configuration.get(OWNER_PROPERTY)
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    return owner, {f.name: f.dataType.simpleString() for f in schema.fields}


def _create_silver(
    spark: SparkSession, target: str, wanted: dict[str, str], properties: dict[str, str]
) -> tuple[str | None, dict[str, str]] | None:
    """Run the CREATE; return silver as the log then shows it (this run's table, or the one a
    concurrent run created first), or None when the location holds other files.

    `CREATE TABLE IF NOT EXISTS delta.`<path>`` does nothing on a non-empty folder without a
    Delta table (Spark sees a table there), hence the read back. A CREATE racing another run's
    fails with a commit conflict once the winner's first commit exists, or with
    DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION (or does nothing) while the winner's log folder
    exists but its first commit does not yet: then it waits up to CREATE_RACE_WAIT_S for it.
    """
    try:
        spark.sql(create_table_sql(target, wanted, properties))
    except Exception as err:
        if is_conflict(err):
            if (found := _existing_silver(target)) is None:
                raise
            return found
        facts = failure_facts(err)
        if NON_EMPTY_LOCATION not in facts.conditions and NON_EMPTY_LOCATION not in facts.text:
            raise
    deadline = time.monotonic() + CREATE_RACE_WAIT_S
    while (found := _existing_silver(target)) is None:
        if holds_foreign_files(target) or time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
    return found


def ensure_silver(
    spark: SparkSession,
    target: str,
    pipeline_id: str,
    source_schema: StructType,
    layout: SilverLayout,
) -> SilverLayout:
    """Create silver (CDF on, owned by `pipeline_id`) or evolve it with new bronze columns.

    Returns `layout` with the silver columns that bronze no longer has as `retired_columns`.

    Raises:
        TargetOwnershipConflict: silver belongs to another pipeline, or its location holds
            files that are not a Delta table.
        IncompatibleSchemaChange: a silver column changed type in bronze, or the delete mode's
            columns do not match the table.
    """
    wanted = _silver_schema(source_schema, layout)
    found = _existing_silver(target)
    if found is None:
        properties = {"delta.enableChangeDataFeed": "true", OWNER_PROPERTY: pipeline_id}
        if layout.deletion_vectors:
            properties["delta.enableDeletionVectors"] = "true"
        found = _create_silver(spark, target, wanted, properties)
        if found is None:
            raise foreign_files_at_target(pipeline_id, target)
        # This run's table, or the one another run created first: checked like any other.
    owner, existing = found
    if owner != pipeline_id:
        raise TargetOwnershipConflict(
            f"silver table is owned by pipeline {owner!r}"
            if owner
            else "silver table exists but was not created by cdf_platform",
            pipeline_id=pipeline_id,
            table=target,
        )
    changed = [c for c, t in wanted.items() if c in existing and existing[c] != t.lower()]
    if changed:
        raise IncompatibleSchemaChange(
            f"column types differ between bronze and silver for {changed}",
            pipeline_id=pipeline_id,
            table=target,
        )
    added = {c: t for c, t in wanted.items() if c not in existing}
    if added:
        columns = ", ".join(f"{quote_ident(c)} {t}" for c, t in added.items())
        spark.sql(f"ALTER TABLE {sql_path(target)} ADD COLUMNS ({columns})")
    platform = {SOURCE_VERSION, IS_DELETED, DELETED_AT}
    retired = tuple(c for c in existing if c not in wanted and c not in platform)
    return replace(layout, retired_columns=retired)


def _null_safe_equal(columns: Sequence[str]) -> str:
    if not columns:
        return "TRUE"
    return " AND ".join(f"t.{quote_ident(c)} <=> s.{quote_ident(c)}" for c in columns)


def _assignments(columns: Sequence[str]) -> list[str]:
    return [f"{quote_ident(c)} = s.{quote_ident(c)}" for c in columns]


def _retired_nulls(layout: SilverLayout) -> list[str]:
    """Assignments that keep the retired columns NULL: every write that touches a row sets them,
    so no path (an upsert over a soft-deleted row, a re-insert) can bring an old value back."""
    return [f"{quote_ident(c)} = NULL" for c in layout.retired_columns]


def _any_retired_value(layout: SilverLayout) -> str:
    """A condition true on a row that still holds a value in a retired column."""
    return "".join(f" OR t.{quote_ident(c)} IS NOT NULL" for c in layout.retired_columns)


def _insert(layout: SilverLayout, version_expr: str) -> str:
    columns = [*layout.data_columns, SOURCE_VERSION]
    values = [f"s.{quote_ident(c)}" for c in layout.data_columns] + [version_expr]
    if layout.delete_mode is DeleteMode.SOFT:
        columns += [IS_DELETED, DELETED_AT]
        values += ["false", "CAST(NULL AS TIMESTAMP)"]
    names = ", ".join(quote_ident(c) for c in columns)
    return f"INSERT ({names}) VALUES ({', '.join(values)})"


def merge_changes_sql(target: str, layout: SilverLayout) -> str:
    """The incremental MERGE of a collapsed change set (view `cdf_platform_source`) into silver.

    A change only applies over an older silver row (`_commit_version` strictly greater), so a
    replayed or out-of-order change set can never move a row backwards.
    """
    newer = f"s.{COMMIT_VERSION} > t.{SOURCE_VERSION}"
    insert = _insert(layout, "s." + COMMIT_VERSION)
    retired = _retired_nulls(layout)
    upsert = [*_assignments(layout.value_columns), f"{SOURCE_VERSION} = s.{COMMIT_VERSION}"]
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
        ON {layout.on_clause()}
        WHEN MATCHED AND s._change_type = 'delete' AND {newer} THEN {on_delete}
        WHEN MATCHED AND s._change_type != 'delete' AND {newer} THEN UPDATE SET {", ".join(upsert)}
        WHEN NOT MATCHED AND s._change_type != 'delete' THEN {insert}
    """


def reconcile_sql(target: str, layout: SilverLayout, version: int, deleted_at: datetime) -> str:
    """The rebuild MERGE of a bronze snapshot (view `cdf_platform_source`) into silver.

    Inserts missing keys, updates rows whose values differ, deletes (or soft-deletes) rows whose
    key is gone. Rows already equal are not rewritten, so silver's own change feed shows only
    real differences. Rows stamped with a version above the snapshot's (a reset source) are
    re-stamped so later changes are not refused as older.
    """
    stamp = str(int(version))
    retired = _retired_nulls(layout)
    differs = f"NOT ({_null_safe_equal(layout.value_columns)}) OR t.{SOURCE_VERSION} > {stamp}"
    differs += _any_retired_value(layout)
    update = [*_assignments(layout.value_columns), f"{SOURCE_VERSION} = {stamp}", *retired]
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


def merge_changes(
    spark: SparkSession,
    target: str,
    collapsed: CollapsedChanges,
    layout: SilverLayout,
    stamp: TxnStamp,
) -> None:
    """Apply a collapsed change set to silver; the commit carries `stamp` (the watermark)."""
    sql = merge_changes_sql(target, layout)
    with stamped(spark, stamp):
        _with_source_view(spark, collapsed.frame, lambda: spark.sql(sql).collect())


def check_snapshot_keys(
    snapshot: DataFrame, keys: Sequence[str], *, pipeline_id: str, table: str, version: int
) -> None:
    """Refuse a snapshot with a null key or a key held by two rows.

    Raises:
        DataQualityError: naming the first offending key and the snapshot version.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    key_cols = [F.col(quote_ident(k)) for k in keys]
    null_key = F.lit(False)
    for key in keys:
        null_key = null_key | F.col(quote_ident(key)).isNull()
    bad = (
        snapshot.groupBy(*key_cols)
        .count()
        .filter(null_key | (F.col("count") > 1))
        .limit(1)
        .collect()
    )
    if bad:
        row = bad[0]
        key_text = ", ".join(f"{k}={row[k]!r}" for k in keys)
        problem = (
            f"bronze snapshot {version} has a row with a null key ({key_text})"
            if any(row[k] is None for k in keys)
            else f"bronze snapshot {version} holds {row['count']} rows for key ({key_text})"
        )
        raise DataQualityError(problem, pipeline_id=pipeline_id, table=table, version=version)


def reconcile_snapshot(
    spark: SparkSession,
    target: str,
    snapshot: DataFrame,
    layout: SilverLayout,
    stamp: TxnStamp,
    deleted_at: datetime,
) -> None:
    """Reconcile silver with the bronze snapshot at `stamp.version`, stamping that watermark."""
    sql = reconcile_sql(target, layout, stamp.version, deleted_at)
    with stamped(spark, stamp):
        _with_source_view(spark, snapshot, lambda: spark.sql(sql).collect())
