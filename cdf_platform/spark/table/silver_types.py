"""How silver follows bronze's column types.

A column whose type bronze widened the way Delta's type widening allows (int -> bigint, ...;
`cdf_platform.window.schema_compat.is_widening`) is widened in silver too: silver gets
`delta.enableTypeWidening` and `ALTER TABLE ... ALTER COLUMN c TYPE t`, Delta's own evolution,
so existing files are kept and read as the wider type. Any other type change is refused with
the two ways out that work: cast back to silver's type in the pipeline's `columns`, or move
silver away and rebuild it with bronze's types. What a run widened is read back from silver's
log for the load log (`silver_widenings`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from cdf_platform.core.errors import IncompatibleSchemaChange
from cdf_platform.core.spec.modes import HistoryMode
from cdf_platform.core.sql import quote_ident, sql_path, sql_string
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.spark.table.silver_layout import (
    CHANGES,
    END_AT,
    EVENT_SEQUENCE,
    EVENT_VALUES,
    START_AT,
    SilverLayout,
)
from cdf_platform.window.schema_compat import TypeWidening, compare_column_types, compare_schemas

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType

logger = logging.getLogger(__name__)

# The table property ALTER COLUMN ... TYPE needs before it widens a column (Delta refuses the
# change otherwise, DELTA_UNSUPPORTED_ALTER_TABLE_CHANGE_COL_OP); setting it adds the
# typeWidening table feature, which silver's readers then need (Delta >= 3.2 reads it).
TYPE_WIDENING_PROPERTY = "delta.enableTypeWidening"
# date -> timestamp_ntz: a TIMESTAMP_NTZ column needs the timestampNtz table feature, which
# ALTER COLUMN does not add by itself (delta-spark 4.4 refuses the change without it).
TIMESTAMP_NTZ_FEATURE = "delta.feature.timestampNtz"
# A column name a `columns` expression can use as it is.
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def column_type_changes(
    layout: SilverLayout, existing: Mapping[str, DataType], incoming: Mapping[str, DataType]
) -> tuple[list[TypeWidening], dict[str, list[str]]]:
    """Bronze's type changes of silver's data columns (`existing`: silver's types, `incoming`:
    bronze's): the widenings Delta allows, and the other changes by column."""
    widenings: list[TypeWidening] = []
    refused: dict[str, list[str]] = {}
    for column in layout.data_columns:
        if column in existing and column in incoming:
            change = compare_column_types(
                existing[column].jsonValue(), incoming[column].jsonValue(), column
            )
            widenings.extend(change.widenings)
            if change.non_additive:
                refused[column] = list(change.non_additive)
    return widenings, refused


def widened_sequence(column: str, layout: SilverLayout, widenings: list[TypeWidening]) -> bool:
    """Whether `column` is `__start_at`/`__end_at` of a history dated by a sequence column
    that bronze widened (they are widened with it)."""
    return (
        column in (START_AT, END_AT)
        and layout.sequence_by is not None
        and any(w.path == (layout.sequence_by,) for w in widenings)
    )


def _history_widenings(
    layout: SilverLayout, widenings: Iterable[TypeWidening]
) -> list[TypeWidening]:
    """What else a history dated by `sequence_by` widens with bronze's columns: a value
    column inside each version's `__changes`, and the dates with the sequence column."""
    if layout.history is not HistoryMode.SCD2:
        return []
    extra: list[TypeWidening] = []
    for widening in widenings:
        column, rest = widening.path[0], widening.path[1:]
        if layout.sequenced_history and column in layout.value_columns:
            path = (CHANGES, "element", EVENT_VALUES, column, *rest)
            extra.append(TypeWidening(path, widening.old, widening.new))
        if column == layout.sequence_by and not rest:
            extra += [TypeWidening((c,), widening.old, widening.new) for c in (START_AT, END_AT)]
            if layout.sequenced_history:
                path = (CHANGES, "element", EVENT_SEQUENCE)
                extra.append(TypeWidening(path, widening.old, widening.new))
    return extra


def widen(
    spark: SparkSession,
    target: str,
    layout: SilverLayout,
    widenings: Iterable[TypeWidening],
    properties: dict[str, str],
) -> None:
    """Widen silver's columns as bronze's were (and what a history widens with them): Delta's
    type widening, existing files kept; `properties`: silver's table properties."""
    widenings = list(widenings)
    widenings += _history_widenings(layout, widenings)
    wanted = {TYPE_WIDENING_PROPERTY: "true"}
    if any(w.new == "timestamp_ntz" for w in widenings):
        wanted[TIMESTAMP_NTZ_FEATURE] = "supported"
    missing = {k: v for k, v in wanted.items() if properties.get(k, "").lower() != v}
    if missing:
        settings = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in missing.items())
        spark.sql(f"ALTER TABLE {sql_path(target)} SET TBLPROPERTIES ({settings})")
    for widening in widenings:
        column = ".".join(quote_ident(part) for part in widening.path)
        spark.sql(f"ALTER TABLE {sql_path(target)} ALTER COLUMN {column} TYPE {widening.new}")
        logger.info("%s: silver %s", target, widening)


def type_change_refused(
    pipeline_id: str,
    target: str,
    layout: SilverLayout,
    existing: dict[str, DataType],
    refused: dict[str, list[str]],
) -> IncompatibleSchemaChange:
    """The refusal of type changes silver cannot follow, with the two fixes that work.

    Keeping silver's type: a `columns` entry of the same name replaces the bronze column, so a
    CAST back to silver's type makes the rows fit silver again (keys cannot be derived).
    Taking bronze's type: silver is created afresh by the rebuild once its location is free.
    """
    details = "; ".join(d for changes in refused.values() for d in changes)
    problem = (
        f"silver cannot take bronze's new column types ({details}): silver follows only the "
        "type widenings Delta allows (int -> bigint, float -> double, a wider decimal, ...)"
    )
    casts = [
        f'{c}: "CAST({c if _PLAIN_NAME.fullmatch(c) else quote_ident(c)} AS '
        f'{existing[c].simpleString()})"'
        for c in refused
        if c not in layout.keys
    ]
    fixes = []
    if casts:
        fixes.append(
            f"to keep silver's types, add {', '.join(casts)} to the pipeline's `columns` (wrap "
            "an expression already there the same way) and rerun the pipeline"
        )
    fixes.append(
        f"to take bronze's types, move the silver table at {target} away (rename its folder, or "
        f"drop the table; silver's change feed then starts over) and run "
        f"`cdf-platform rebuild {pipeline_id}`"
    )
    return IncompatibleSchemaChange(
        problem, pipeline_id=pipeline_id, table=target, action="; or ".join(fixes)
    )


def silver_widenings(
    target: str, since_version: int | None, storage: StorageConfig
) -> tuple[TypeWidening, ...]:
    """The silver columns widened by the commits after `since_version` (JVM-free, from the
    log): what a run did to silver's types, for the load log. Empty when silver did not exist
    at `since_version` or no later commit changed its metadata.
    """
    if since_version is None or not is_delta_table(target, storage):
        return ()
    log = DeltaLog(target, storage)
    later = range(since_version + 1, log.latest_version() + 1)
    if not any(log.has_commit(v) and log.commit(v).metadata is not None for v in later):
        return ()
    before = log.metadata_at(since_version)
    if before is None:
        return ()
    return compare_schemas(before, log.latest_metadata()).widenings
