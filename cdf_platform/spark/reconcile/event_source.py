"""Change-event logs (`changes: events`): bronze rows that each describe one source change, read
as the change rows the rest of a run folds, and the tombstones that keep a deleted key
deleted.

An event log is append-only: the events of a run are the rows bronze *appended* in the pinned
range (its change feed's `insert` rows). A bronze DELETE of old events (the usual way to bound
such a table), an UPDATE of them or an OPTIMIZE changes no silver row; only a delete event
deletes (docs/design.md section 5b).

Each event becomes one change row: its row image (the `events.row` struct's fields, else the
event's own columns), `_change_type` `update_postimage` for an upsert and `delete` for a
delete, `truncate` for a truncate, and the bronze commit's version and time. An operation value
no list names gives `unknown:<value>`, which the collapse refuses as a data error naming it
(`cdf_platform.spark.read.changes.collapse_changes`, `ChangeOrder.events`).

Tombstones: silver keeps no row of a hard-deleted key, nor of a key deleted before silver ever
held it, so an event older than the delete that arrives later would bring the key back. Each
delete's key, sequence value, version and time is kept in a Delta table under the control root
(`tombstones/<pipeline>`) for `events.tombstone_retention_hours`. SCD1 drops an upsert no newer
than its key's tombstone before the MERGE (a soft-deleted row also takes the delete's sequence
value); SCD2 keeps a delete in the key's history, and joins a tombstone to the fold of a key it
touches that does not hold it (a delete that found the key absent). The latest truncate's
sequence value (`truncations/<pipeline>`) outdates every change not newer than it.

Example:
    >>> changes = event_changes(bronze_feed, spec)  # doctest: +SKIP
    >>> tombstones = Tombstones.of(control, spec)  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import DataQualityError
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import quote_ident, sql_path, sql_string
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.spark.quality.conform import analysed, change_rows, invalid_spec
from cdf_platform.spark.read.change_feed import (
    CHANGE_TYPE,
    COMMIT_TIMESTAMP,
    COMMIT_VERSION,
    FEED_COLUMNS,
    ReadContext,
    classified,
)
from cdf_platform.spark.read.changes import UNKNOWN
from cdf_platform.spark.write.merge import Truncation, with_source_view
from cdf_platform.spark.write.merge_sql import (
    INSERT_ALL,
    UPDATE_ALL,
    merge_statement,
    when_matched,
    when_not_matched,
)
from cdf_platform.spark.write.silver_writer import SilverWriter

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from cdf_platform.spark.read.changes import CollapsedChanges
    from cdf_platform.state.control import ControlTable

TRUNCATE = "truncate"
"""The change type of an event whose operation is in `events.truncates`."""
_TOMB_SEQUENCE = "_tombstone_sequence"
_TOMB_VERSION = "_tombstone_version"


def event_changes(feed: DataFrame, spec: PipelineSpec) -> DataFrame:
    """The change rows of the events bronze appended in `feed` (bronze rows with the change
    feed's three columns: a change-feed read, or a snapshot read as `insert`s).

    Raises:
        InvalidPipelineSpec: `events.operation` or `events.row` is not a valid expression over
            the event row, or `events.row` is not a struct.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)
    from pyspark.sql.types import StructType

    events = spec.events
    assert events is not None
    appended = feed.filter(F.col(CHANGE_TYPE) == "insert")
    operation = _expression(spec, "events.operation", events.operation, appended).cast("string")
    # Deletes first, then upserts, then truncates; a value in no list is `unknown:<value>`.
    kind = F.concat(F.lit(UNKNOWN), F.coalesce(operation, F.lit("NULL")))
    for values, change in (
        (events.truncates, TRUNCATE),
        (events.upserts, "update_postimage"),
        (events.deletes, "delete"),
    ):
        if values:
            kind = F.when(operation.isin(*values), F.lit(change)).otherwise(kind)
    event_columns = [c for c in appended.columns if c not in FEED_COLUMNS]
    if events.row is None:
        image = [F.col(quote_ident(c)) for c in event_columns]
    else:
        row = _expression(spec, "events.row", events.row, appended)
        row_type = appended.select(row.alias("_row")).schema["_row"].dataType
        if not isinstance(row_type, StructType):
            raise invalid_spec(
                spec,
                f"events.row ({events.row!r}) gives a {row_type.simpleString()}, not a struct "
                "of silver's columns",
            )
        fields = [f.name for f in row_type.fields]
        image = [row[f].alias(f) for f in fields]
        # The sequence column may sit beside the image (Debezium's `ts_ms`, `source.lsn` as a
        # derived column is the spec's `columns`' job).
        if spec.sequence_by in event_columns and spec.sequence_by not in fields:
            image.append(F.col(quote_ident(spec.sequence_by)))
    return appended.select(
        *image, kind.alias(CHANGE_TYPE), F.col(COMMIT_VERSION), F.col(COMMIT_TIMESTAMP)
    )


def _expression(spec: PipelineSpec, field: str, expression: str, frame: DataFrame) -> Column:
    """`expression` as a column over `frame`, analysed now; a parse or analysis error names
    `field`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    what = f"{field} ({expression!r}) is not valid over the event row"
    analysed(spec, what, lambda: frame.select(F.expr(expression)))
    return F.expr(expression)


def event_change_rows(
    spark: SparkSession,
    feed: DataFrame,
    spec: PipelineSpec,
    ctx: ReadContext,
    *,
    judged: bool = False,
) -> tuple[DataFrame, Truncation | None]:
    """The change rows a run folds from an event log's `feed` (bronze rows with the change
    feed's columns): its events' images (`event_changes`) with the spec's steps and columns
    applied (`cdf_platform.spark.quality.conform.change_rows`), its truncates set apart
    (`split_truncates`). `judged`: the rows carry their expectations' `FAILED_RULES`, none kept
    out yet (`QualityGate`).

    Raises:
        InvalidPipelineSpec: a step or an events expression is refused.
        DataQualityError: a truncate event without a sequence value.
    """
    changes = change_rows(spark, event_changes(feed, spec), spec, judged=judged)
    return split_truncates(changes, spec, ctx)


def split_truncates(
    changes: DataFrame, spec: PipelineSpec, ctx: ReadContext
) -> tuple[DataFrame, Truncation | None]:
    """`changes` without its truncate events, and the latest of them (None without any, or
    when `events.truncates` is empty: no row is read then).

    Raises:
        DataQualityError: a truncate event has a NULL `sequence_by` value.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    assert spec.events is not None and spec.sequence_by is not None
    if not spec.events.truncates:
        return changes, None
    is_truncate = F.col(CHANGE_TYPE) == TRUNCATE
    seq = F.col(quote_ident(spec.sequence_by))
    latest = classified(
        ctx,
        lambda: (
            changes.filter(is_truncate)
            .agg(
                F.max(F.struct(seq.alias("s"), F.col(COMMIT_VERSION), F.col(COMMIT_TIMESTAMP))),
                F.count_if(seq.isNull()),
            )
            .collect()[0]
        ),
    )
    found, null_sequences = latest[0], latest[1]
    if null_sequences:
        raise DataQualityError(
            f"a truncate event in {ctx.described} has a NULL sequence_by value "
            f"({spec.sequence_by})",
            pipeline_id=spec.id,
            table=spec.source,
            version=ctx.start_version,
        )
    rest = changes.filter(~is_truncate)
    if found is None:
        return rest, None
    sequence_type = changes.schema[spec.sequence_by].dataType.simpleString()
    value = found["s"]
    text = value.isoformat() if hasattr(value, "isoformat") else str(value)
    literal = f"CAST({sql_string(text)} AS {sequence_type})"
    at = found[COMMIT_TIMESTAMP] or datetime.now(UTC)
    return rest, Truncation(literal, int(found[COMMIT_VERSION]), at)


@dataclass(frozen=True)
class Tombstones:
    """The tombstones (and truncates) of a pipeline over an event log (module doc).

    Attributes:
        path: The Delta table holding them (`<control root>/tombstones/<pipeline id>`).
        keys: The pipeline's keys.
        sequence_by: The column that orders events.
        retention: How long a tombstone is kept after its delete's commit.
        truncations_path: The Delta table holding the truncates seen (their sequence values):
            an event no newer than the latest is ignored, however late it arrives.
        storage: The lake's object-store options (the tables' logs are read with them).
    """

    path: str
    keys: tuple[str, ...]
    sequence_by: str
    retention: timedelta
    truncations_path: str
    storage: StorageConfig

    @classmethod
    def of(cls, control: ControlTable, spec: PipelineSpec) -> Tombstones | None:
        """The tombstones `spec` keeps under the control tables `control`, or None (not an
        event log)."""
        if spec.events is None or spec.sequence_by is None:
            return None
        root = control.root.rstrip("/")
        return cls(
            f"{root}/tombstones/{spec.id}",
            tuple(spec.keys),
            spec.sequence_by,
            timedelta(hours=spec.events.tombstone_retention_hours),
            f"{root}/truncations/{spec.id}",
            control.storage,
        )

    def _exists(self, spark: SparkSession, path: str | None = None) -> bool:
        # From the log, without Spark: Delta's `DeltaTable.isDeltaTable` needs Delta's Connect
        # plugin on a Spark Connect server, which the warm engine does not load.
        return is_delta_table(path or self.path, self.storage)

    def _record_truncation(self, spark: SparkSession, truncation: Truncation) -> None:
        """Keep `truncation`'s sequence value (its literal is typed as the sequence column)."""
        row = spark.sql(
            f"SELECT {truncation.sequence} AS sequence, "
            f"CAST({int(truncation.version)} AS BIGINT) AS version"
        )
        row.write.format("delta").mode("append").save(self.truncations_path)

    def _truncated_before(self, spark: SparkSession) -> Column | None:
        """The latest truncate's sequence value, as a literal column, or None."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        if not self._exists(spark, self.truncations_path):
            return None
        (latest,) = (
            spark.read.format("delta").load(self.truncations_path).agg(F.max("sequence")).collect()
        )
        return None if latest[0] is None else F.lit(latest[0])

    def record(self, spark: SparkSession, changes: DataFrame, now: datetime) -> None:
        """Keep a tombstone for each delete among `changes` (one change per key), the newest
        per key, and drop those older than the retention."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        deletes = changes.filter(F.col(CHANGE_TYPE) == "delete").select(
            *(F.col(quote_ident(k)) for k in self.keys),
            F.col(quote_ident(self.sequence_by)).alias(_TOMB_SEQUENCE),
            F.col(COMMIT_VERSION).alias(_TOMB_VERSION),
            F.col(COMMIT_TIMESTAMP).alias("_deleted_at"),
        )
        if not deletes.take(1):
            return
        if not self._exists(spark):
            deletes.write.format("delta").mode("append").save(self.path)
        else:
            on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in self.keys)
            newer = (
                f"s.{_TOMB_SEQUENCE} > t.{_TOMB_SEQUENCE} OR (s.{_TOMB_SEQUENCE} = "
                f"t.{_TOMB_SEQUENCE} AND s.{_TOMB_VERSION} > t.{_TOMB_VERSION})"
            )
            clauses = [when_matched(f"({newer})", UPDATE_ALL), when_not_matched(None, INSERT_ALL)]
            sql = merge_statement(self.path, on, clauses)
            with_source_view(spark, deletes, lambda: spark.sql(sql).collect())
        cutoff = (now - self.retention).isoformat()
        spark.sql(
            f"DELETE FROM {sql_path(self.path)} "
            f"WHERE _deleted_at < CAST({sql_string(cutoff)} AS TIMESTAMP)"
        ).collect()

    def deletes(self, spark: SparkSession) -> DataFrame | None:
        """The tombstones as delete change rows (keys, the sequence column, `_change_type`,
        `_commit_version`), or None before the first."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        if not self._exists(spark):
            return None
        return (
            spark.read.format("delta")
            .load(self.path)
            .select(
                *(F.col(quote_ident(k)) for k in self.keys),
                F.col(_TOMB_SEQUENCE).alias(self.sequence_by),
                F.lit("delete").alias(CHANGE_TYPE),
                F.col(_TOMB_VERSION).alias(COMMIT_VERSION),
            )
        )

    def apply(
        self,
        spark: SparkSession,
        writer: SilverWriter,
        collapsed: CollapsedChanges,
        truncation: Truncation | None = None,
        **how: Any,
    ) -> None:
        """Record `collapsed`'s deletes and `truncation` (before silver's MERGE: a crash between
        the two replays the same events into the same tombstones), then apply `collapsed`
        through `writer` (`how`: its `apply_changes` arguments): SCD1 without the changes a
        tombstone or a truncate outdates, removing the rows `truncation` empties; SCD2 with the
        tombstones joining the touched keys' folds."""
        self.record(spark, collapsed.frame, datetime.now(UTC))
        if truncation is not None:
            self._record_truncation(spark, truncation)
        if writer.layout.sequenced_history:
            writer.apply_changes(collapsed, recorded_deletes=self.deletes(spark), **how)
        else:
            screened = replace(collapsed, frame=self.screen(spark, collapsed.frame))
            writer.apply_changes(screened, truncation=truncation, **how)

    def screen(self, spark: SparkSession, changes: DataFrame) -> DataFrame:
        """`changes` without the ones a truncate outdates (not newer than the latest), and
        without the upserts a tombstone outdates: an upsert of a deleted key whose sequence
        value is older than the delete's (or equal, from an earlier commit)."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        truncated = self._truncated_before(spark)
        seq = F.col(quote_ident(self.sequence_by))
        if truncated is not None:
            changes = changes.filter(seq > truncated)
        if not self._exists(spark):
            return changes
        tombs = (
            spark.read.format("delta")
            .load(self.path)
            .select(*(quote_ident(k) for k in self.keys), _TOMB_SEQUENCE, _TOMB_VERSION)
        )
        tomb = F.col(_TOMB_SEQUENCE)
        outdated = (
            (F.col(CHANGE_TYPE) != "delete")
            & tomb.isNotNull()
            & ((seq < tomb) | ((seq == tomb) & (F.col(COMMIT_VERSION) <= F.col(_TOMB_VERSION))))
        )
        screened = changes.join(tombs, on=list(self.keys), how="left").filter(~outdated)
        return screened.select(*(quote_ident(c) for c in changes.columns))
