"""The quality gate of a run: its rows judged by the pipeline's expectations, counted, refused
(`fail`), kept out of silver (`drop`, `quarantine`), and the quarantined ones held in the
pipeline's quarantine table, `<control root>/quarantine/<pipeline id>`.

The quarantine table holds each key's current row when that row fails a `quarantine` rule (and
no `drop` rule): the key columns, the row as JSON (`row`), the rules it fails, the bronze
version of its change, the run that put it there. It is written before silver's commit, so a
crash between the two leaves it ahead of silver, and the rerun of the same range writes it to
the same rows: an incremental run MERGEs each key's latest change in (a quarantined row in,
any other change of the key out, never over a row of a later bronze version); a snapshot read or
an event log's fold replaces it whole. Invariant: silver's keys and the quarantine's are the
spec applied to bronze with its `quarantine` rules as `warn`.

Example:
    >>> gate = QualityGate(spec, quarantine_path("/lake/_control", "orders"))  # doctest: +SKIP
    >>> judgement = gate.screen_changes(judged, version=12)  # doctest: +SKIP
    >>> gate.hold(spark, judgement, run_id="r1")  # before silver's commit  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.core.spec.expectations import ExpectationAction, ExpectationCounts
from cdf_platform.core.sql import quote_ident, sql_path
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.spark.quality.expectation_judging import (
    FAILED_RULES,
    ROW_IMAGES,
    count_failures,
    keep_out,
    kept_out,
    quarantined,
    refuse_failures,
)
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, COMMIT_VERSION, FEED_COLUMNS
from cdf_platform.spark.write.merge import with_source_view
from cdf_platform.spark.write.merge_sql import (
    DELETE,
    insert_values,
    merge_statement,
    update_set,
    when_matched,
    when_not_matched,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from cdf_platform.core.spec.pipeline_spec import PipelineSpec

HELD = "_held"
SEQUENCE_VALUE = "sequence_value"
QUARANTINE_COLUMNS = ("row", "failed_rules", "bronze_version", "run_id", "quarantined_at")


@dataclass(frozen=True)
class Judgement:
    """What the gate made of a run's rows.

    Attributes:
        rows: The rows for silver: a change feed's with the kept-out rows as deletes, a
            snapshot's without them.
        counts: Rows judged and failing per rule (None: the spec has no expectations).
        held: Each key's latest row with `_held` (a quarantined row) for the quarantine write
            (None: no `quarantine` rule).
        whole: `held` covers every key (a snapshot, an event log's fold): the quarantine is
            replaced, not merged.
        cached: The judged rows, cached so bronze is read once (None: nothing cached).
    """

    rows: DataFrame
    counts: ExpectationCounts | None = None
    held: DataFrame | None = None
    whole: bool = False
    cached: DataFrame | None = None

    def release(self) -> None:
        """Drop the cached judged rows."""
        if self.cached is not None:
            self.cached.unpersist()


@dataclass(frozen=True)
class QualityGate:
    """The expectations of `spec`, and its quarantine table at `path`."""

    spec: PipelineSpec
    path: str | None
    storage: StorageConfig = ENVIRONMENT_ONLY

    @property
    def quarantines(self) -> bool:
        """Whether the spec has a `quarantine` rule."""
        return any(e.action is ExpectationAction.QUARANTINE for e in self.spec.expectations)

    def _count(self, latest: DataFrame, version: int) -> ExpectationCounts:
        counts = count_failures(latest, self.spec)
        refuse_failures(latest, self.spec, counts, version=version)
        return counts

    def screen_changes(self, judged: DataFrame, *, version: int, whole: bool = False) -> Judgement:
        """Count and refuse a judged change feed (`conform_changes(judged=True)`); `whole`: it
        holds every key's changes (an event log's fold).

        Raises:
            DataQualityError: a row fails a `fail` rule (nothing written).
        """
        if FAILED_RULES not in judged.columns:
            return Judgement(judged, whole=whole)
        cached = judged.persist()
        # Each key's latest change is judged: the row silver holds after the run (a row a later
        # change of the range replaced never reaches it, and fixing it in bronze is the remedy).
        latest = self._latest(cached)
        counts = self._count(latest, version)
        held = self._held_rows(latest) if self.quarantines else None
        return Judgement(keep_out(cached, self.spec), counts, held, whole, cached)

    def screen_snapshot(self, judged: DataFrame, *, version: int) -> Judgement:
        """Count and refuse a judged snapshot (`conform_snapshot(judged=True)`).

        Raises:
            DataQualityError: a row fails a `fail` rule (nothing written).
        """
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        if FAILED_RULES not in judged.columns:
            return Judgement(judged, whole=True)
        cached = judged.persist()
        counts = self._count(cached, version)
        held = None
        if self.quarantines:
            rows = cached.withColumn(CHANGE_TYPE, F.lit("insert"))
            held = self._held_rows(rows.withColumn(COMMIT_VERSION, F.lit(version).cast("long")))
        kept = cached.filter(~kept_out(self.spec)).drop(FAILED_RULES)
        return Judgement(kept, counts, held, True, cached)

    def _held_rows(self, rows: DataFrame) -> DataFrame:
        """`rows` (one per key) as quarantine rows, with `_held`."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        keys = self.spec.keys
        data = [c for c in rows.columns if c not in (*FEED_COLUMNS, FAILED_RULES, HELD)]
        held = quarantined(self.spec) & F.col(CHANGE_TYPE).isin(*ROW_IMAGES)
        return rows.select(
            *(F.col(quote_ident(k)) for k in keys),
            F.to_json(F.struct(*(F.col(quote_ident(c)) for c in data))).alias("row"),
            F.coalesce(F.col(FAILED_RULES), F.array().cast("array<string>")).alias("failed_rules"),
            F.col(COMMIT_VERSION).cast("long").alias("bronze_version"),
            *self._sequence(F.col(quote_ident(self.spec.sequence_by or ""))),
            held.alias(HELD),
        )

    def _sequence(self, column: Column) -> list[Column]:
        """`column` as the quarantine's `sequence_value` (with `sequence_by`), else nothing."""
        return [column.alias(SEQUENCE_VALUE)] if self.spec.sequence_by else []

    @property
    def _columns(self) -> list[str]:
        """The quarantine's columns after the keys."""
        return [*QUARANTINE_COLUMNS, *([SEQUENCE_VALUE] if self.spec.sequence_by else [])]

    def _newer(self) -> str:
        """The MERGE condition of a source row at least as new as the quarantine's: by sequence
        value, then bronze version (a rerun of an older range never undoes a later change)."""
        by_version = "s.bronze_version >= t.bronze_version"
        if not self.spec.sequence_by:
            return by_version
        seq = f"s.{SEQUENCE_VALUE}", f"t.{SEQUENCE_VALUE}"
        return f"({seq[0]} > {seq[1]} OR ({seq[0]} = {seq[1]} AND {by_version}))"

    @property
    def reads_silver(self) -> bool:
        """Whether `hold` reads silver (a `quarantine` rule under `sequence_by`: the guard
        against late changes), and so can take the run's key filter on it."""
        return self.quarantines and self.spec.sequence_by is not None

    def _not_outdated(
        self, spark: SparkSession, rows: DataFrame, silver_filter: str | None
    ) -> DataFrame:
        """`rows` without the late changes silver outdates: a key whose silver row has a later
        sequence value kept that row (a late, older change changes nothing in silver), so its
        quarantine entry does not change either. `silver_filter`: the run's key filter on
        silver `t` (its changes' keys, so every row of a key in `rows`), or None."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        if not self.spec.sequence_by or not is_delta_table(self.spec.target, self.storage):
            return rows
        seq = quote_ident(self.spec.sequence_by)
        silver = spark.read.format("delta").load(self.spec.target).alias("t")
        if silver_filter is not None:  # only silver's files that can hold these keys
            silver = silver.filter(F.expr(silver_filter))
        newest = silver.groupBy(*(quote_ident(k) for k in self.spec.keys)).agg(
            F.max(seq).alias("_silver_sequence")
        )
        joined = rows.join(newest, on=list(self.spec.keys), how="left")
        outdated = F.coalesce(F.col("_silver_sequence") > F.col(SEQUENCE_VALUE), F.lit(False))
        return joined.filter(~outdated).drop("_silver_sequence")

    def _latest(self, changes: DataFrame) -> DataFrame:
        """Each key's latest change (by sequence value, then version; in one commit a row image
        before a delete)."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        keys = [F.col(quote_ident(k)) for k in self.spec.keys]
        image = F.col(CHANGE_TYPE).isin(*ROW_IMAGES).cast("int")
        sequence = [F.col(quote_ident(self.spec.sequence_by))] if self.spec.sequence_by else []
        order = F.struct(*sequence, F.col(COMMIT_VERSION), image)
        carried = F.struct(*(F.col(quote_ident(c)) for c in changes.columns))
        latest = changes.groupBy(*keys).agg(F.max_by(carried, order).alias("_latest"))
        return latest.select("_latest.*")

    def hold(
        self,
        spark: SparkSession,
        judgement: Judgement,
        *,
        run_id: str,
        silver_filter: str | None = None,
    ) -> None:
        """Write the quarantine from `judgement` (before silver's commit; nothing without a
        `quarantine` rule); `silver_filter`: the run's key filter on silver, for the guard
        against late changes (`reads_silver`)."""
        from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

        if judgement.held is None:
            if (
                judgement.whole
                and self.path is not None
                and is_delta_table(self.path, self.storage)
            ):
                # No rule quarantines any more (the spec changed): nothing is held.
                spark.sql(f"DELETE FROM {sql_path(self.path)}").collect()
            return
        if self.path is None:
            raise ValueError(f"{self.spec.id}: quarantined rows but no quarantine table given")
        rows = judgement.held.withColumn("run_id", F.lit(run_id)).withColumn(
            "quarantined_at", F.current_timestamp()
        )
        if judgement.whole or not is_delta_table(self.path, self.storage):
            kept = rows.filter(F.col(HELD)).drop(HELD)
            writer = kept.write.format("delta").mode("overwrite")
            writer.option("overwriteSchema", "true").save(self.path)
            return
        keys = self.spec.keys
        columns = [*keys, *self._columns]
        on = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in keys)
        current = self._newer()
        rows = self._not_outdated(spark, rows, silver_filter)
        assignments = [f"{quote_ident(c)} = s.{quote_ident(c)}" for c in self._columns]
        clauses = [
            when_matched(f"{current} AND s.{HELD}", update_set(assignments)),
            when_matched(f"{current} AND NOT s.{HELD}", DELETE),
            when_not_matched(f"s.{HELD}", insert_values(columns)),
        ]
        sql = merge_statement(self.path, on, clauses)
        with_source_view(spark, rows, lambda: spark.sql(sql).collect())
