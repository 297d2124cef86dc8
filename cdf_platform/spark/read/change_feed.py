"""Pinned-range reads of a Delta table's change feed, and the classification of their failures.

A read is always pinned on both ends: `startingVersion` = watermark + 1 and `endingVersion` = a
version verified to exist (Delta clamps a larger `endingVersion` to the latest silently).
Failures are classified by Delta error condition (`cdf_platform.spark.runtime.failures`), whether
they surface at `load()` or only when an action runs. What a run does with the rows it reads, one
change per key, is `cdf_platform.spark.read.changes`.

Example:
    >>> frame = read_changes(spark, "/lake/bronze/orders", 42, 57)  # doctest: +SKIP
    >>> kept = project_columns(frame, spec, FEED_COLUMNS)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from cdf_platform.core.errors import (
    FIX_SPEC_FIELD,
    REBUILDABLE,
    CdfPlatformError,
    EngineUnavailable,
    InvalidPipelineSpec,
    UnknownReadFailure,
)
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import quote_ident, sql_path
from cdf_platform.spark.runtime.failures import (
    ENGINE_RULE,
    engine_loss,
    engine_loss_action,
    failure_facts,
    rule_for,
)
from cdf_platform.spark.table.silver_layout import unkeyable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
FEED_COLUMNS = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
"""The change feed's own columns, beside a change row's data columns."""


@dataclass(frozen=True)
class ReadContext:
    """What a read is about, for error messages."""

    pipeline_id: str | None
    table: str
    start_version: int
    end_version: int
    feed: str = "bronze change feed"
    """How messages name what is read."""
    action: str | None = None
    """What repairs a failure a snapshot read repairs (`REBUILDABLE`), where the class's own
    action (a silver rebuild) does not apply."""
    snapshot: bool = False
    """A snapshot read (`versionAsOf end_version`): messages name its version, not a range."""

    @classmethod
    def at_version(
        cls,
        pipeline_id: str | None,
        table: str,
        version: int,
        *,
        feed: str = "bronze snapshot",
        action: str | None = None,
    ) -> ReadContext:
        """The context of a snapshot read of `table` at `version` (a rebuild's, a full batch's).

        Example:
            >>> ReadContext.at_version("orders", "/lake/bronze/orders", 22).described
            'bronze snapshot at version 22'
        """
        return cls(pipeline_id, table, version, version, feed=feed, action=action, snapshot=True)

    @property
    def described(self) -> str:
        """The read as messages name it: `bronze change feed (21, 22]` (the versions after the
        first number, up to the second) or `bronze snapshot at version 22`."""
        if self.snapshot:
            return f"{self.feed} at version {self.end_version}"
        return f"{self.feed} ({self.start_version - 1}, {self.end_version}]"


def as_change_feed(snapshot: DataFrame, version: int, timestamp: datetime | None) -> DataFrame:
    """`snapshot`'s rows as a change feed read: each an `insert` of `version` at `timestamp`
    (a snapshot does not say in which commit a row arrived)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return snapshot.withColumns(
        {
            CHANGE_TYPE: F.lit("insert"),
            COMMIT_VERSION: F.lit(version).cast("bigint"),
            COMMIT_TIMESTAMP: F.lit(timestamp).cast("timestamp"),
        }
    )


def classify_read_failure(
    err: BaseException, ctx: ReadContext, doing: str | None = None
) -> CdfPlatformError:
    """Map a Spark/Delta failure of a read or a silver write to the platform's taxonomy.

    The table of `cdf_platform.spark.runtime.failures` decides: error conditions and Delta's typed
    exceptions along the cause chain first, the message text only as the fallback (many of
    these failures reach Python as a raw Py4JJavaError). `doing` names the step that failed in
    the message of a failure no rule knows and of a lost engine (default: `reading <the read>`):
    a silver write is classified with its read's context, since a lost window surfaces there.
    """
    if isinstance(err, CdfPlatformError):
        return err
    facts = failure_facts(err)
    first_line = facts.first_line or type(err).__name__
    rule = rule_for(facts)
    doing = doing or f"reading {ctx.described}"
    if rule is ENGINE_RULE:
        return EngineUnavailable(
            f"{engine_loss(facts)}, {doing}",
            pipeline_id=ctx.pipeline_id,
            table=ctx.table,
            version=ctx.start_version,
            action=engine_loss_action(facts),
        )
    if rule is None:
        error: type[CdfPlatformError] = UnknownReadFailure
        problem = f"{doing} failed: {first_line}"
    else:
        summary = rule.summary_of(snapshot=ctx.snapshot)
        error, problem = rule.error, f"{summary} {ctx.described} ({first_line})"
    return error(
        problem,
        pipeline_id=ctx.pipeline_id,
        table=ctx.table,
        version=ctx.start_version,
        action=ctx.action if issubclass(error, REBUILDABLE) else None,
    )


def classified(ctx: ReadContext, action: Callable[[], T], doing: str | None = None) -> T:
    """Run `action`, re-raising any failure as a classified platform error (`doing`: see
    `classify_read_failure`).

    Never retries: a lost window does not come back, and a blind retry with
    `ignoreMissingFiles` would turn it into silent loss.
    """
    try:
        return action()
    except CdfPlatformError:
        raise
    except Exception as err:
        raise classify_read_failure(err, ctx, doing) from err


def read_changes(
    spark: SparkSession,
    path: str,
    start_version: int,
    end_version: int,
    *,
    pipeline_id: str | None = None,
    context: ReadContext | None = None,
) -> DataFrame:
    """The change feed of the Delta table at `path` for versions [start, end], both pinned.

    `context` names the read in classified errors (default: a pipeline's read of bronze).

    `end_version` must be a version known to exist (Delta would clamp a larger one silently).
    Failures at `load()` are classified here; failures at the action must be wrapped by the
    caller with `classified(...)`.

    Raises:
        ReplayWindowLost, CdfNotEnabled, IncompatibleSchemaChange, SourceNotFound,
        UnknownReadFailure: classified load-time failures.
    """
    if start_version > end_version:
        raise ValueError(f"empty range [{start_version}, {end_version}]")
    ctx = context or ReadContext(pipeline_id, path, start_version, end_version)
    # The table is named as SQL names it (`delta.`<path>``, always absolute), not `.load(path)`:
    # a path load goes through Delta's V1 `DeltaDataSource.createRelation`, which merges the
    # reader's options (lowercased by Spark) with its own camel-case copy of the CDF options,
    # so every read logged "Converting duplicated key" for each of the three. Resolved through
    # Delta's catalog, each option reaches the change feed's relation once; the rows and the
    # error conditions (PATH_NOT_FOUND, DELTA_MISSING_CHANGE_DATA, ...) are the same.
    return classified(
        ctx,
        lambda: (
            spark.read.option("readChangeFeed", "true")
            .option("startingVersion", start_version)
            .option("endingVersion", end_version)
            .table(sql_path(path))
        ),
    )


def project_columns(frame: DataFrame, spec: PipelineSpec, extra: Sequence[str] = ()) -> DataFrame:
    """Keep `spec`'s columns (keys first; include/exclude applied, but never to the keys, the
    derived columns or the sequence column) plus `extra`.

    Raises:
        InvalidPipelineSpec: a key or an included column is not in the source schema.
    """
    internal = {CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP, *extra}
    available = [c for c in frame.columns if c not in internal]
    named = [*spec.keys, *(spec.include_columns or [])]
    missing = [c for c in named if c not in available]
    if missing:
        raise InvalidPipelineSpec(
            f"columns {missing} (keys or include_columns) are not in the source schema {available}",
            pipeline_id=spec.id,
            table=spec.source,
            action="fix `keys` / `include_columns` in the pipelines file",
        )
    if spec.sequence_by is not None and spec.sequence_by not in available:
        raise InvalidPipelineSpec(
            f"sequence_by {spec.sequence_by!r} is neither a bronze nor a derived column "
            f"({available})",
            pipeline_id=spec.id,
            table=spec.source,
            action=FIX_SPEC_FIELD,
        )
    types = {f.name: f.dataType for f in frame.schema.fields}
    if unfit := [f"{k} ({types[k].simpleString()})" for k in spec.keys if unkeyable(types[k])]:
        raise InvalidPipelineSpec(
            f"key columns {unfit} cannot be keys: Spark cannot match rows on a MAP or a VARIANT",
            pipeline_id=spec.id,
            table=spec.source,
            action="choose `keys` of comparable types (integers, strings, dates, timestamps, "
            "decimals, binary, booleans, or structs of them)",
        )
    kept = spec.kept_columns
    data = [c for c in available if c not in spec.keys]
    if spec.include_columns is not None:
        data = [c for c in data if c in spec.include_columns or c in kept]
    data = [c for c in data if c not in spec.exclude_columns or c in kept]
    return frame.select(*(quote_ident(c) for c in [*spec.keys, *data, *extra]))
