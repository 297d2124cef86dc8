"""Silver compared with its spec applied to a pinned bronze version, by key buckets of hashes
(docs/runbook.md, "Verification").

What is compared: the rows a rebuild at bronze version V would leave silver holding (the same
function computes them: `cdf_platform.spark.reconcile.rebuild.pinned_snapshot`, or for an event
log `cdf_platform.spark.reconcile.event_fold.pinned_fold`) with silver's *current* rows at a pinned
silver version: every row of an SCD1 silver, the rows not marked `_is_deleted` of a soft-delete one,
the open versions (`__end_at` NULL) of an SCD2 one. Platform columns (`_source_commit_version`,
the delete marks, the history's dates and changes) are left out: they say when a row was
written, which a rebuild and the incremental runs date differently. With
`ignore_null_updates`, a NULL bronze holds is no evidence: silver's value stands, as a rebuild
keeps it (`cdf_platform.spark.write.history.keeping_values`). Of an event log, only the keys bronze
still holds events of are compared: silver keeps the keys whose events bronze's retention
removed, and nothing in bronze says what they hold.

How: each row becomes its key and one hash of its key and data columns (NULL told apart from
every value; MAP and VARIANT values in comparable form); keys are spread over `BUCKETS` buckets
by a hash of the key; per bucket, each side's row count, sum and XOR of the row hashes are
compared. Only the buckets that differ are compared key by key, to name the keys. Bronze and
silver are each read once (silver twice with `ignore_null_updates`, for the values it keeps):
the keyed hashes are persisted for both steps.

Example:
    >>> comparison = compare_silver(spark, spec, pins, strategy.expected_rows)  # doctest: +SKIP
    >>> comparison.equal, comparison.differing_keys  # doctest: +SKIP
    (False, 3)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdf_platform.core.silver_columns import PLATFORM_COLUMNS
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import quote_ident
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, ReadContext, classified
from cdf_platform.spark.reconcile.event_fold import pinned_fold
from cdf_platform.spark.reconcile.rebuild import pinned_snapshot
from cdf_platform.spark.table.silver_layout import END_AT, IS_DELETED, SilverLayout, comparable_sql
from cdf_platform.spark.write.history import keeping_values
from cdf_platform.spark.write.merge import check_snapshot_keys

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType

    from cdf_platform.spark.reconcile.event_source import Tombstones

BUCKETS = 4096
"""Key buckets per comparison: a difference costs a key-by-key comparison of its bucket only."""
SAMPLE_SIZE = 20
"""Differing keys named per comparison (all are counted)."""
_BUCKET = "_verify_bucket"
_HASH = "_verify_hash"


@dataclass(frozen=True)
class SilverPins:
    """The versions a verification compares: bronze `bronze_version` (committed at
    `bronze_timestamp`) with silver `silver_version`."""

    bronze_version: int
    silver_version: int
    bronze_timestamp: datetime | None = None


@dataclass(frozen=True)
class SilverComparison:
    """What a comparison found.

    Attributes:
        pins: The versions compared.
        expected_rows: Rows the spec applied to bronze gives.
        silver_rows: Silver's comparable rows (module doc).
        differing_buckets: Key buckets whose aggregates differ.
        differing_keys: Keys whose rows differ (missing from silver, unexpected in it, held
            twice, or holding other values).
        sample: Up to `SAMPLE_SIZE` of them, by key: the key's columns and `difference`
            (`missing`, `unexpected`, `duplicated` or `changed`).
    """

    pins: SilverPins
    expected_rows: int
    silver_rows: int
    differing_buckets: int = 0
    differing_keys: int = 0
    sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        """Whether silver equals its spec applied to bronze."""
        return self.differing_keys == 0


@dataclass(frozen=True)
class ExpectedRows:
    """The rows silver should hold (`expected_rows`).

    Attributes:
        ctx: The context their read's failures are classified in.
        rows: The rows (silver's data columns).
        held_keys: An event log's: the keys bronze holds events of (None: every key counts).
        release: Frees what the read cached (an event log's fold).
    """

    ctx: ReadContext
    rows: DataFrame
    held_keys: DataFrame | None = None
    release: Callable[[], None] = lambda: None


ExpectedRowsOf = Callable[["SparkSession", SilverPins], ExpectedRows]
"""How a pipeline's expected rows are read (its write strategy's: `snapshot_rows`, or for an
event log `folded_rows` with its tombstones)."""


def snapshot_rows(spark: SparkSession, spec: PipelineSpec, pins: SilverPins) -> ExpectedRows:
    """The rows silver should hold at `pins.bronze_version`: a rebuild's snapshot
    (`pinned_snapshot`).

    Raises:
        InvalidPipelineSpec, DataQualityError: as a rebuild's.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: bronze cannot be read.
    """
    ctx, snapshot = pinned_snapshot(spark, spec, pins.bronze_version, pins.bronze_timestamp)
    return ExpectedRows(ctx, snapshot)


def folded_rows(
    spark: SparkSession, spec: PipelineSpec, pins: SilverPins, tombstones: Tombstones
) -> ExpectedRows:
    """The rows an event log's silver should hold at `pins.bronze_version`: the fold of the
    events bronze holds, each key's latest event unless a tombstone or truncate outdates it
    (`Tombstones.screen`) or it deletes; only the keys bronze holds events of count.

    Raises:
        InvalidPipelineSpec, DataQualityError: as a rebuild's.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: bronze cannot be read.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    version, timestamp = pins.bronze_version, pins.bronze_timestamp
    fold = pinned_fold(spark, spec, version, timestamp, latest_only=True)
    folded = fold.collapsed.frame
    screened = tombstones.screen(spark, folded)
    live = screened.filter(F.col(CHANGE_TYPE) != "delete")
    rows = live.select(*(quote_ident(c) for c in fold.data_columns))
    held = folded.select(*(quote_ident(k) for k in spec.keys))
    return ExpectedRows(fold.ctx, rows, held, fold.collapsed.release)


def silver_rows(spark: SparkSession, target: str, version: int) -> DataFrame:
    """Silver's current rows at `version` (module doc), every column."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    silver = spark.read.format("delta").option("versionAsOf", version).load(target)
    if END_AT in silver.columns:
        silver = silver.filter(F.col(END_AT).isNull())
    if IS_DELETED in silver.columns:
        silver = silver.filter(~F.col(IS_DELETED))
    return silver


def _aligned(
    expected: DataFrame, silver: DataFrame, keys: list[str]
) -> tuple[list[str], dict[str, DataType]]:
    """The columns compared (keys first, then silver's data columns, then any the spec gives
    that silver lacks) and each one's type: silver's where it has the column (a widened type
    compares the values, not their width)."""
    silver_types = {
        f.name: f.dataType for f in silver.schema.fields if f.name not in PLATFORM_COLUMNS
    }
    expected_types = {f.name: f.dataType for f in expected.schema.fields}
    types = {**expected_types, **silver_types}
    names = [*keys, *(c for c in [*silver_types, *expected_types] if c not in keys)]
    return list(dict.fromkeys(names)), types


def _keyed(frame: DataFrame, names: list[str], types: dict[str, DataType], keys: list[str]) -> Any:
    """`frame` as keys, key bucket and row hash; a column it lacks counts as NULL."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    present = set(frame.columns)

    def column(name: str) -> Column:
        value = F.col(quote_ident(name)) if name in present else F.lit(None)
        return value.cast(types[name]).alias(name)

    typed = frame.select(*(column(c) for c in names))
    parts: list[Column] = []
    for name in names:
        ref = quote_ident(name)
        # A NULL is skipped by Spark's hashes: its flag keeps (NULL, 1) apart from (1, NULL).
        parts += [F.col(ref).isNull(), F.expr(comparable_sql(ref, types[name]))]
    key_columns = [F.col(quote_ident(k)) for k in keys]
    return typed.select(
        *key_columns,
        F.pmod(F.xxhash64(*key_columns), F.lit(BUCKETS)).alias(_BUCKET),
        F.xxhash64(*parts).alias(_HASH),
    )


def _bucket_sums(keyed: DataFrame) -> DataFrame:
    """Per bucket: rows, the sum of the row hashes' upper 44 bits (no overflow below 2^19 rows a
    bucket: two billion rows in all) and their XOR."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return keyed.groupBy(_BUCKET).agg(
        F.count(F.lit(1)).alias("n"),
        F.sum(F.shiftright(F.col(_HASH), 20)).alias("s"),
        F.bit_xor(F.col(_HASH)).alias("x"),
    )


def _differing_buckets(expected: DataFrame, silver: DataFrame) -> tuple[list[int], int, int]:
    """The buckets whose aggregates differ, and each side's row count."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    left, right = _bucket_sums(expected).alias("e"), _bucket_sums(silver).alias("s")
    joined = left.join(right, F.col(f"e.{_BUCKET}") == F.col(f"s.{_BUCKET}"), "full_outer")
    same = (
        F.col("e.n").eqNullSafe(F.col("s.n"))
        & F.col("e.s").eqNullSafe(F.col("s.s"))
        & F.col("e.x").eqNullSafe(F.col("s.x"))
    )
    rows = joined.select(
        F.coalesce(F.col(f"e.{_BUCKET}"), F.col(f"s.{_BUCKET}")).alias(_BUCKET),
        F.col("e.n").alias("en"),
        F.col("s.n").alias("sn"),
        same.alias("same"),
    ).collect()
    buckets = sorted(int(r[_BUCKET]) for r in rows if not r["same"])
    return buckets, sum(r["en"] or 0 for r in rows), sum(r["sn"] or 0 for r in rows)


def _per_key(keyed: DataFrame, keys: list[str], side: str) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return keyed.groupBy(*(quote_ident(k) for k in keys)).agg(
        F.count(F.lit(1)).alias(f"{side}_n"), F.min(_HASH).alias(f"{side}_h")
    )


def _differences(expected: DataFrame, silver: DataFrame, keys: list[str]) -> DataFrame:
    """The keys of `expected` and `silver` (keyed, of the differing buckets) whose rows differ,
    with what differs (`difference`)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    joined = _per_key(expected, keys, "e").join(_per_key(silver, keys, "s"), keys, "full_outer")
    difference = (
        F.when(F.col("s_n").isNull(), "missing")
        .when(F.col("e_n").isNull(), "unexpected")
        .when(F.col("s_n") > 1, "duplicated")
        .when(~F.col("e_h").eqNullSafe(F.col("s_h")), "changed")
    )
    return joined.select(*(quote_ident(k) for k in keys), difference.alias("difference")).filter(
        F.col("difference").isNotNull()
    )


def compare_silver(
    spark: SparkSession,
    spec: PipelineSpec,
    pins: SilverPins,
    expected_rows: ExpectedRowsOf,
) -> SilverComparison:
    """Compare silver at `pins.silver_version` with `spec` applied to bronze at
    `pins.bronze_version` (module doc); writes nothing. `expected_rows`: how the rows silver
    should hold are read (the pipeline's write strategy's, `WriteStrategy.expected_rows`).

    Raises:
        InvalidPipelineSpec: the spec's transforms are refused.
        DataQualityError: bronze holds a null or duplicated key where silver differs.
        ReplayWindowLost, SourceNotFound, UnknownReadFailure: bronze cannot be read.
    """
    wanted = expected_rows(spark, pins)
    try:
        return _compare(spark, spec, pins, wanted)
    finally:
        wanted.release()


def _compare(
    spark: SparkSession, spec: PipelineSpec, pins: SilverPins, wanted: ExpectedRows
) -> SilverComparison:
    """`compare_silver` once the expected rows are known: both sides keyed and persisted, their
    buckets compared, the keys of the buckets that differ named. With `ignore_null_updates`
    silver is read a second time, for the values its rows keep (`keeping_values`)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    keys, ctx, expected = list(spec.keys), wanted.ctx, wanted.rows
    silver = silver_rows(spark, spec.target, pins.silver_version)
    if wanted.held_keys is not None:  # an event log: only the keys bronze holds events of
        silver = silver.join(wanted.held_keys.distinct(), keys, "left_semi")
    names, types = _aligned(expected, silver, keys)
    if spec.ignore_null_updates and set(expected.columns) <= set(silver.columns):
        layout = SilverLayout.of(spec, expected.schema)
        current = silver.select(*(quote_ident(c) for c in layout.data_columns))
        expected = keeping_values(expected, current, layout)
    left = _keyed(expected, names, types, keys).persist(StorageLevel.MEMORY_AND_DISK)
    right = _keyed(silver, names, types, keys).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        buckets, expected_count, silver_count = classified(
            ctx, lambda: _differing_buckets(left, right)
        )
        counts = SilverComparison(pins, expected_count, silver_count, len(buckets))
        if not buckets:
            return counts
        in_buckets = F.col(_BUCKET).isin(buckets)
        suspects = left.filter(in_buckets)
        # A rebuild refuses a bronze key held twice (or NULL): so does its comparison.
        check_snapshot_keys(
            suspects, keys, pipeline_id=spec.id, table=spec.source, version=pins.bronze_version
        )
        differing = _differences(suspects, right.filter(in_buckets), keys).cache()
        try:
            count = differing.count()
            sample = differing.orderBy(*(quote_ident(k) for k in keys)).limit(SAMPLE_SIZE)
            named = [row.asDict() for row in sample.collect()]
        finally:
            differing.unpersist()
        return SilverComparison(pins, expected_count, silver_count, len(buckets), count, named)
    finally:
        left.unpersist()
        right.unpersist()
