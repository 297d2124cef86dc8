"""The key filter of the incremental MERGE, and the key-ordered first load it pays off on."""

from __future__ import annotations

import datetime as dt
import itertools
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV
from cdf_platform.core.sql import sql_path
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.runtime.session import scoped_conf
from cdf_platform.spark.runtime.small_steps import COPY_ON_WRITE_CONF
from cdf_platform.spark.write.key_filter import (
    ENABLED_CONF,
    files_skipped,
    integer_ranges,
    key_filter,
    key_ranges,
)
from cdf_platform_testkit.spark_conf import SessionsWithConf
from cdf_platform_tests.bronze import control_for, make_bronze, rows, spec_for, sql


def test_integer_ranges_split_at_the_widest_gaps() -> None:
    values = [5, 1, 2, 3, 40, 41, 42, 1000, 2, 3]
    assert integer_ranges(values, most=3) == [(1, 5), (40, 42), (1000, 1000)]
    assert integer_ranges(values, most=2) == [(1, 42), (1000, 1000)]
    assert integer_ranges(values, most=1) == [(1, 1000)]
    assert integer_ranges([7], most=4) == [(7, 7)]
    assert integer_ranges([4, 5, 6, 7, 9], most=4) == [(4, 7), (9, 9)]
    assert integer_ranges([], most=4) == []


def _matching(spark: SparkSession, path: str, predicate: str) -> list[int]:
    frame = spark.sql(f"SELECT t.id FROM {sql_path(path)} AS t WHERE {predicate}")
    return sorted(r["id"] for r in frame.collect())


def test_the_ranges_hold_every_changed_key_and_only_cover_keys_they_can_write(
    spark: SparkSession, lake: Path
) -> None:
    table = str(lake / "keys")
    spark.sql(
        f"CREATE TABLE {sql_path(table)} (id BIGINT, code STRING, day DATE, at TIMESTAMP) "
        "USING DELTA"
    )
    day = dt.date(2026, 1, 1)
    stored = [(i, f"c'{i}", day + dt.timedelta(days=i % 9), None) for i in range(200)]
    spark.createDataFrame(stored, "id BIGINT, code STRING, day DATE, at TIMESTAMP").write.format(
        "delta"
    ).mode("append").save(table)
    changed = [(3, "c'3", day + dt.timedelta(days=3)), (150, "c'150", day + dt.timedelta(days=6))]
    changes = spark.createDataFrame(
        [(*row, dt.datetime(2026, 1, 1)) for row in changed],
        "id BIGINT, code STRING, day DATE, at TIMESTAMP",
    )

    ranges = key_ranges(changes, ["id", "code", "day", "at"])
    predicate = " AND ".join(r.sql() for r in ranges)
    # Ranges for each key it can write (split at the gap for integers); nothing for timestamps.
    assert predicate == (
        "(t.`id` BETWEEN 3 AND 3 OR t.`id` BETWEEN 150 AND 150)"
        " AND (t.`code` BETWEEN 'c\\'150' AND 'c\\'3')"
        " AND (t.`day` BETWEEN DATE'2026-01-04' AND DATE'2026-01-07')"
    )
    assert _matching(spark, table, predicate) == [3, 150]

    # More change rows than it fetches: one range per key column, its minimum to its maximum.
    (wide,) = key_ranges(changes, ["id"], most_collected=1)
    assert wide.sql() == "(t.`id` BETWEEN 3 AND 150)"
    assert _matching(spark, table, wide.sql()) == list(range(3, 151))

    assert key_ranges(changes, ["at"]) == []


def test_first_load_is_ordered_by_key_and_a_clustered_backlog_skips_the_other_files(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JVM_FREE_MERGE_MAX_ROWS_ENV, "0")  # Spark's MERGE and its file skipping
    spec = spec_for(lake)
    control = control_for(lake)
    # Bronze's rows arrive out of key order, in one file.
    seeded = [((i * 37) % 1000, f"n{i}", i) for i in range(1000)]
    make_bronze(spark, spec.source, seeded)
    # The platform runs in a session of its own: the cap reaches it as a Spark resource's conf.
    capped = SessionsWithConf(spark, {"spark.sql.files.maxRecordsPerFile": "100"})
    first = PipelineRunner.on(control, lambda: capped).run(spec)
    assert first.mode.value == "initial_load" and first.rows_inserted == 1000

    silver = spark.read.format("delta").load(spec.target)
    per_file = silver.groupBy("_metadata.file_path").agg(F.min("id"), F.max("id")).collect()
    spans = sorted((row[1], row[2]) for row in per_file)
    assert len(spans) >= 10
    # Each file holds one key range: no two files' ranges overlap.
    assert all(high < low for (_, high), (low, _) in itertools.pairwise(spans))

    # Keys 500..519 change: one or two of the ten files hold them. The filter's range rules the
    # others out by their statistics, so the MERGE carries it; a change set with a key in every
    # file would skip nothing, and gets none.
    sql(spark, spec.source, "UPDATE {t} SET amount = -1 WHERE id BETWEEN 500 AND 519")
    clustered = spark.range(500, 520)
    # A key in every file, whatever the first load's file boundaries: range partitioning
    # samples its bounds, and a file may hold a single key (every other key in every file).
    spread = spark.range(0, 1000)
    assert files_skipped(spec.target, key_ranges(clustered, ["id"])) >= len(spans) - 2
    assert key_filter(spark, spec.target, clustered, ["id"]) == "(t.`id` BETWEEN 500 AND 519)"
    assert files_skipped(spec.target, key_ranges(spread, ["id"])) == 0
    assert key_filter(spark, spec.target, spread, ["id"]) is None
    with scoped_conf(spark, {ENABLED_CONF: "false"}):
        assert key_filter(spark, spec.target, clustered, ["id"]) is None

    # Deletion vectors kept for this small silver (0: not rewritten), as a large one keeps them.
    keeping = SessionsWithConf(spark, {COPY_ON_WRITE_CONF: "0"})
    second = PipelineRunner.on(control, lambda: keeping).run(spec)
    assert second.mode.value == "incremental" and second.rows_updated == 20
    # The MERGE marked the replaced rows of the one or two files holding those keys.
    metrics = DeltaTable(spec.target).history(1)[0]["operationMetrics"]
    assert 1 <= int(metrics["numTargetDeletionVectorsAdded"]) <= 2
    assert rows(spark, spec.target) == rows(spark, spec.source)
