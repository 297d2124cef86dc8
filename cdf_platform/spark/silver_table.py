"""Silver as a table: created on the first write (change feed on, owned by its pipeline, deletion
vectors when asked), evolved with bronze's new columns, and checked against the pipeline that
writes it. Reads of silver's own state go through the log, without Spark.

Example:
    >>> layout = ensure_silver(spark, "/lake/silver/orders", "orders", schema, layout)
    ... # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from cdf_platform.core.errors import (
    IncompatibleSchemaChange,
    TargetOwnershipConflict,
    foreign_files_at_target,
)
from cdf_platform.core.spec import DeleteMode, HistoryMode
from cdf_platform.core.sql import create_table_sql, quote_ident, sql_path
from cdf_platform.deltalog.tables import holds_foreign_files, is_delta_table
from cdf_platform.spark.failures import failure_facts, is_conflict
from cdf_platform.spark.merge import (
    DELETED_AT,
    END_AT,
    IS_DELETED,
    SOURCE_VERSION,
    START_AT,
    SilverLayout,
)
from cdf_platform.state.watermark import OWNER_PROPERTY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

# Delta's refusal to create a table in a folder that holds files but no commit yet.
NON_EMPTY_LOCATION = "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"
# How long a CREATE that lost a race waits for the winner's first commit to appear.
CREATE_RACE_WAIT_S = 10.0


def _silver_schema(source: StructType, layout: SilverLayout) -> dict[str, str]:
    by_name = {f.name: f.dataType.simpleString() for f in source.fields}
    columns = {c: by_name[c] for c in layout.data_columns}
    columns[SOURCE_VERSION] = "BIGINT"
    if layout.delete_mode is DeleteMode.SOFT:
        columns[IS_DELETED] = "BOOLEAN"
        columns[DELETED_AT] = "TIMESTAMP"
    if layout.history is HistoryMode.SCD2:
        columns[START_AT] = "TIMESTAMP"
        columns[END_AT] = "TIMESTAMP"
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


def holds_files(target: str) -> bool:
    """Whether silver's current version has any data file (JVM-free, from the log)."""
    from deltalake import DeltaTable

    return bool(DeltaTable(target).file_uris())


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
    platform = {SOURCE_VERSION, IS_DELETED, DELETED_AT, START_AT, END_AT}
    retired = tuple(c for c in existing if c not in wanted and c not in platform)
    return replace(layout, retired_columns=retired)
