"""Catalog table names, located through Spark's catalog (Hive metastore, in-memory, or any
catalog the session is configured with).

A run of a pipeline that names a table asks the catalog where it lives (`DESCRIBE DETAIL`) and
records the answer in the control tables (`ControlTable.record_location`): the JVM-free parts
then read the table's log there. Every such run asks again, since a name can be dropped and
created elsewhere; the assessment turns a moved source into `SourceReset`. A silver name the
catalog does not know yet gets its schema's default location and is registered there once silver
exists (an external table: dropping the name never deletes silver's files).

Only SQL and `spark.catalog` are used, which Spark Connect serves as well.

Example:
    >>> locate_in_catalog(spark, spec, control)  # doctest: +SKIP
    >>> control.read_locations()["bronze.orders"]["location"]  # doctest: +SKIP
    '/warehouse/bronze.db/orders'
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from cdf_platform.core.errors import InvalidPipelineSpec, SourceNotFound, TargetOwnershipConflict
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import quote_ident, sql_string
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.state.control import ControlTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)


def qualified(name: str) -> str:
    """`name` as SQL, each part backtick-quoted."""
    return ".".join(quote_ident(part) for part in name.split("."))


def plain_location(uri: str) -> str:
    """A catalog's location as the platform writes locations: `file:` URIs as local paths
    (`file:/w/t` and `file:///w/t` -> `/w/t`), object-store URIs as they are."""
    if uri.startswith("file:"):
        return "/" + uri.removeprefix("file:").lstrip("/")
    return uri


def describe_table(spark: SparkSession, name: str) -> tuple[str, str | None, str] | None:
    """(location, Delta table id, format) of the catalog table `name`, or None if the catalog
    has no such table."""
    if not spark.catalog.tableExists(name):
        return None
    row = spark.sql(f"DESCRIBE DETAIL {qualified(name)}").collect()[0].asDict()
    table_id = row.get("id")
    return plain_location(str(row["location"])), table_id, str(row.get("format") or "").lower()


def default_location(spark: SparkSession, name: str, pipeline_id: str) -> str:
    """Where the catalog would keep a new table `name`: its schema's location / table.

    Raises:
        InvalidPipelineSpec: the schema does not exist.
    """
    namespace, table = name.rsplit(".", 1)
    if not spark.catalog.databaseExists(namespace):
        raise InvalidPipelineSpec(
            f"target {name!r} is in the schema {namespace!r}, which the catalog does not have",
            pipeline_id=pipeline_id,
            table=name,
            action=f"create the schema (CREATE SCHEMA {namespace}) or fix `target`",
        )
    rows = spark.sql(f"DESCRIBE SCHEMA EXTENDED {qualified(namespace)}").collect()
    info = {str(row[0]).lower(): str(row[1]) for row in rows}
    return f"{plain_location(info['location']).rstrip('/')}/{table}"


def _locate_source(spark: SparkSession, spec: PipelineSpec, name: str) -> tuple[str, str | None]:
    found = describe_table(spark, name)
    if found is None:
        raise SourceNotFound(
            f"the catalog has no table {name!r}",
            pipeline_id=spec.id,
            table=name,
            action="check the `source` name (schema.table or catalog.schema.table), and that "
            "the session's catalog is the one that holds it (spark.sql.catalogImplementation, "
            "the metastore conf)",
        )
    location, table_id, kind = found
    if kind != "delta":
        raise SourceNotFound(
            f"{name!r} is a {kind or 'non-Delta'} table, not a Delta table",
            pipeline_id=spec.id,
            table=name,
            action="point `source` at a Delta table with the change feed on",
        )
    return location, table_id


def _locate_target(
    spark: SparkSession, spec: PipelineSpec, name: str, storage: StorageConfig
) -> tuple[str, str | None]:
    found = describe_table(spark, name)
    if found is None:
        location = default_location(spark, name, spec.id)
        if not is_delta_table(location, storage):
            return location, None  # created by this run
        _name_table(spark, name, location)  # silver written by a run that stopped early
        return location, DeltaLog(location, storage).table_id()
    location, table_id, kind = found
    if kind != "delta":
        raise TargetOwnershipConflict(
            f"{name!r} is a {kind or 'non-Delta'} table that cdf_platform did not create",
            pipeline_id=spec.id,
            table=name,
        )
    return location, table_id


def locate_in_catalog(spark: SparkSession, spec: PipelineSpec, control: ControlTable) -> None:
    """Ask the catalog where `spec`'s named tables live and record what changed.

    Raises:
        SourceNotFound: the source name is unknown to the catalog, or not a Delta table.
        TargetOwnershipConflict: the target name is a table that is not Delta.
        InvalidPipelineSpec: the target's schema does not exist.
    """
    names = spec.table_names
    if not names:
        return
    recorded = control.read_locations()
    for role, name in names.items():
        if role == "source":
            location, table_id = _locate_source(spark, spec, name)
        else:
            location, table_id = _locate_target(spark, spec, name, control.storage)
        before = recorded.get(name)
        if before is not None and (before["location"], before["table_id"]) == (location, table_id):
            continue
        if before is not None and before["location"] != location:
            logger.warning(
                "%s: %s moved from %s to %s", spec.id, name, before["location"], location
            )
        control.record_location(name, location, table_id, located_by=spec.id)


def _name_table(spark: SparkSession, name: str, location: str) -> None:
    """Give the Delta table at `location` the catalog name `name`, unless the name exists."""
    if spark.catalog.tableExists(name):
        return
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {qualified(name)} USING DELTA LOCATION {sql_string(location)}"
    )
    logger.info("registered %s at %s", name, location)


def register_silver(
    spark: SparkSession,
    name: str,
    location: str,
    control: ControlTable,
    pipeline_id: str,
    *,
    created: bool,
) -> None:
    """Register the silver table at `location` as `name`, once silver exists there; when this
    run `created` it, also record its table id (the run located the name before the table
    existed, so it recorded none)."""
    if not is_delta_table(location, control.storage):
        return
    _name_table(spark, name, location)
    if not created:
        return  # located with its id before the run (`locate_in_catalog`)
    table_id = DeltaLog(location, control.storage).table_id()
    before = control.read_locations().get(name)
    if before is None or (before["location"], before["table_id"]) != (location, table_id):
        control.record_location(name, location, table_id, located_by=pipeline_id)
