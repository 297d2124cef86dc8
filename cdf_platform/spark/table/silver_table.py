"""Silver as a table: created on the first write (change feed on, owned by its pipeline, deletion
vectors when asked), evolved with bronze's new columns and type widenings (`silver_types`:
widened as Delta allows, any other type change refused with its fixes), and checked against
the pipeline that writes it. Reads of silver's own state go through the log, without Spark.

Example:
    >>> layout = ensure_silver(spark, "/lake/silver/orders", "orders", schema, layout)
    ... # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from cdf_platform.core.errors import (
    IncompatibleSchemaChange,
    TargetOwnershipConflict,
    foreign_files_at_target,
)
from cdf_platform.core.spec.modes import DeleteMode, HistoryMode
from cdf_platform.core.sql import create_table_sql, quote_ident, sql_path, sql_string
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.deltalog.tables import holds_foreign_files, is_delta_table
from cdf_platform.spark.runtime.failures import failure_facts, is_conflict
from cdf_platform.spark.table.silver_layout import (
    CHANGES,
    DELETED_AT,
    END_AT,
    EVENT_GENERATION,
    EVENT_KIND,
    EVENT_SEQUENCE,
    EVENT_VALUES,
    EVENT_VERSION,
    IS_DELETED,
    PLATFORM_COLUMNS,
    SOURCE_VERSION,
    START_AT,
    SilverLayout,
)
from cdf_platform.spark.table.silver_types import (
    column_type_changes,
    type_change_refused,
    widen,
    widened_sequence,
)
from cdf_platform.state.watermark import OWNER_PROPERTY

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType, StructType


# Delta's refusal to create a table in a folder that holds files but no commit yet.
NON_EMPTY_LOCATION = "DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION"
# How long a CREATE that lost a race waits for the winner's first commit to appear.
CREATE_RACE_WAIT_S = 10.0
DELETION_VECTORS = "delta.enableDeletionVectors"


@dataclass(frozen=True)
class _Silver:
    """Silver as its log shows it: owner property, column types, table properties."""

    owner: str | None
    types: dict[str, DataType]
    properties: dict[str, str] = field(default_factory=dict)


def _silver_schema(source: StructType, layout: SilverLayout) -> dict[str, str]:
    by_name = {f.name: f.dataType.simpleString() for f in source.fields}
    columns = {c: by_name[c] for c in layout.data_columns}
    columns[SOURCE_VERSION] = "BIGINT"
    if layout.delete_mode is DeleteMode.SOFT:
        columns[IS_DELETED] = "BOOLEAN"
        columns[DELETED_AT] = "TIMESTAMP"
    if layout.history is HistoryMode.SCD2:
        # With sequence_by, versions are dated by the sequence column's values.
        moment = by_name[layout.sequence_by] if layout.sequence_by else "TIMESTAMP"
        columns[START_AT] = moment
        columns[END_AT] = moment
    if layout.sequenced_history:
        assert layout.sequence_by is not None
        values = ", ".join(f"{quote_ident(c)}: {by_name[c]}" for c in layout.value_columns)
        fields = (
            (EVENT_SEQUENCE, by_name[layout.sequence_by]),
            (EVENT_GENERATION, "INT"),
            (EVENT_VERSION, "BIGINT"),
            (EVENT_KIND, "STRING"),
            (EVENT_VALUES, f"STRUCT<{values}>"),
        )
        event = ", ".join(f"{quote_ident(name)}: {t}" for name, t in fields)
        columns[CHANGES] = f"ARRAY<STRUCT<{event}>>"
    return columns


def _history_kind_refused(
    pipeline_id: str, target: str, layout: SilverLayout
) -> IncompatibleSchemaChange:
    """The refusal of an SCD2 silver written with `sequence_by` for a spec without it, or the
    other way round: its versions are dated by another clock, and (without `__changes`) a late
    change could not be placed."""
    wanted = "with" if layout.sequenced_history else "without"
    held = "without" if layout.sequenced_history else "with"
    return IncompatibleSchemaChange(
        f"silver's history was written {held} sequence_by, the pipeline now runs {wanted} it",
        pipeline_id=pipeline_id,
        table=target,
        action=(
            f"move the silver table at {target} away (rename its folder, or drop the table) and "
            f"run `cdf-platform rebuild {pipeline_id}`, or restore the pipeline's sequence_by"
        ),
    )


def _existing_silver(target: str, storage: StorageConfig) -> _Silver | None:
    """Silver's owner property, column types and properties (JVM-free); None if absent.

    Read through `deltalake` from the log (with the lake's object-store options, `storage`):
    no Spark job, no DESCRIBE DETAIL.
    """
    if not is_delta_table(target, storage):
        return None
    from pyspark.sql.types import StructType  # pure Python: parses the log's schema JSON

    table = open_delta_table(target, storage)
    configuration = dict(table.metadata().configuration)
    schema = StructType.fromJson(json.loads(table.schema().to_json()))
    return _Silver(
        configuration.get(OWNER_PROPERTY),
        {f.name: f.dataType for f in schema.fields},
        configuration,
    )


def holds_files(target: str, storage: StorageConfig) -> bool:
    """Whether silver's current version has any data file (JVM-free, from the log, read with
    the lake's object-store options `storage`)."""
    return bool(open_delta_table(target, storage).file_uris())


def _create_silver(
    spark: SparkSession,
    target: str,
    wanted: dict[str, str],
    properties: dict[str, str],
    storage: StorageConfig,
) -> _Silver | None:
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
            if (found := _existing_silver(target, storage)) is None:
                raise
            return found
        facts = failure_facts(err)
        if NON_EMPTY_LOCATION not in facts.conditions and NON_EMPTY_LOCATION not in facts.text:
            raise
    deadline = time.monotonic() + CREATE_RACE_WAIT_S
    while (found := _existing_silver(target, storage)) is None:
        if holds_foreign_files(target, storage) or time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
    return found


def ensure_silver(
    spark: SparkSession,
    target: str,
    pipeline_id: str,
    source_schema: StructType,
    layout: SilverLayout,
    *,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> SilverLayout:
    """Create silver (CDF on, owned by `pipeline_id`) or evolve it with new bronze columns and
    type widenings (silver's log read with the lake's object-store options, `storage`;
    default: the environment's settings alone).

    Returns `layout` with the silver columns that bronze no longer has as `retired_columns`.

    Raises:
        TargetOwnershipConflict: silver belongs to another pipeline, or its location holds
            files that are not a Delta table.
        IncompatibleSchemaChange: a silver column changed type in bronze other than by a
            widening Delta allows, or a platform column's type does not match the table.
    """
    wanted = _silver_schema(source_schema, layout)
    found = _existing_silver(target, storage)
    if found is None:
        properties = {"delta.enableChangeDataFeed": "true", OWNER_PROPERTY: pipeline_id}
        if layout.deletion_vectors:
            properties[DELETION_VECTORS] = "true"
        found = _create_silver(spark, target, wanted, properties, storage)
        if found is None:
            raise foreign_files_at_target(pipeline_id, target)
        # This run's table, or the one another run created first: checked like any other.
    _check_owner(found, pipeline_id, target)
    existing = found.types
    if layout.history is HistoryMode.SCD2 and (CHANGES in existing) != layout.sequenced_history:
        raise _history_kind_refused(pipeline_id, target, layout)
    incoming = {f.name: f.dataType for f in source_schema.fields}
    widenings, refused = column_type_changes(layout, existing, incoming)
    # `__changes` holds the value columns: it evolves with them (below).
    changed = [
        c
        for c, t in wanted.items()
        if c in PLATFORM_COLUMNS - {CHANGES}
        and c in existing
        and existing[c].simpleString() != t.lower()
        and not widened_sequence(c, layout, widenings)
    ]
    if changed:
        raise IncompatibleSchemaChange(
            f"column types differ between the pipeline and silver for {changed}",
            pipeline_id=pipeline_id,
            table=target,
        )
    if refused:
        raise type_change_refused(pipeline_id, target, layout, existing, refused)
    if widenings:
        widen(spark, target, layout, widenings, found.properties)
    added = {c: t for c, t in wanted.items() if c not in existing}
    if added:
        columns = ", ".join(f"{quote_ident(c)} {t}" for c, t in added.items())
        if layout.sequenced_history:
            # Each version's changes hold every value column too.
            columns += "".join(
                f", {quote_ident(CHANGES)}.element.{quote_ident(EVENT_VALUES)}.{quote_ident(c)} {t}"
                for c, t in added.items()
                if c in layout.value_columns
            )
        spark.sql(f"ALTER TABLE {sql_path(target)} ADD COLUMNS ({columns})")
    retired = tuple(c for c in existing if c not in wanted and c not in PLATFORM_COLUMNS)
    return replace(layout, retired_columns=retired)


def _check_owner(found: _Silver, pipeline_id: str, target: str) -> None:
    if found.owner != pipeline_id:
        raise TargetOwnershipConflict(
            f"silver table is owned by pipeline {found.owner!r}"
            if found.owner
            else "silver table exists but was not created by cdf_platform",
            pipeline_id=pipeline_id,
            table=target,
        )


def check_silver_owner(target: str, pipeline_id: str, storage: StorageConfig) -> None:
    """Refuse a silver table that does not exist or is not `pipeline_id`'s (JVM-free).

    Raises:
        TargetOwnershipConflict: silver is another pipeline's, not the platform's, or absent.
    """
    found = _existing_silver(target, storage)
    if found is None:
        raise TargetOwnershipConflict(
            "no silver table to rewrite", pipeline_id=pipeline_id, table=target
        )
    _check_owner(found, pipeline_id, target)


def set_deletion_vectors(
    spark: SparkSession, target: str, *, enabled: bool, storage: StorageConfig
) -> None:
    """Turn silver's deletion vectors on or off for its next writes (`deletion_vectors` edited
    in the spec). Off keeps the vectors already written until silver's files are rewritten
    (`REORG TABLE ... APPLY (PURGE)`); readers need deletion-vector support until then."""
    found = _existing_silver(target, storage)
    wanted = "true" if enabled else "false"
    if found is not None and found.properties.get(DELETION_VECTORS, "false").lower() != wanted:
        spark.sql(
            f"ALTER TABLE {sql_path(target)} SET TBLPROPERTIES "
            f"({sql_string(DELETION_VECTORS)} = {sql_string(wanted)})"
        )
