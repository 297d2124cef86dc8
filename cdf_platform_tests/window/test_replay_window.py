"""The exact replay window (docs/design.md section 4) against real delta-spark tables.

Each criterion is broken on its own, the earliest replayable version and the break are asserted
exactly, and Spark's own change-feed read is shown to fail there (or, for a deleted commit file,
to skip it silently) and to succeed from the earliest replayable version.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import SourceNotFound
from cdf_platform.core.sql import sql_path
from cdf_platform.deltalog.actions import TableMetadata
from cdf_platform.window.replay_window import (
    DeadlineKind,
    ReplayWindow,
    WindowBreakKind,
    assess_consumer,
    compute_replay_window,
)
from cdf_platform.window.schema_compat import non_additive_changes
from cdf_platform_testkit.synthetic_log import commit_file, write_synthetic_commits
from cdf_platform_tests.lake_platform import spark_conf

HOUR = 3600.0
CDF_ON = "'delta.enableChangeDataFeed' = 'true'"
NO_DV = "'delta.enableDeletionVectors' = 'false'"
# Raised only when the read runs (often as a raw Py4JJavaError), not at load.
MISSING_FILE = r"FAILED_READ_FILE\.FILE_NOT_EXIST"


def set_age(path: str, seconds_ago: float) -> None:
    """Set a file's modification time `seconds_ago` seconds before now."""
    moment = time.time() - seconds_ago
    os.utime(path, (moment, moment))


def mtime(path: str) -> datetime:
    """A file's modification time, in whole milliseconds as Java reports it."""
    return datetime.fromtimestamp(os.stat(path).st_mtime_ns // 1_000_000 / 1000, tz=UTC)


def create(spark: SparkSession, path: str, properties: str, columns: str = "id INT") -> str:
    """Create a Delta table at `path`; return its SQL reference."""
    table = sql_path(path)
    spark.sql(f"CREATE TABLE {table} ({columns}) USING DELTA TBLPROPERTIES ({properties})")
    return table


def cdf_rows(
    spark: SparkSession, path: str, start: int, end: int | None = None
) -> list[tuple[object, ...]]:
    """(id, _change_type, _commit_version) of a batch CDF read of [start, end or latest]."""
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()  # re-list files we changed
    reader = spark.read.format("delta").option("readChangeFeed", "true")
    reader = reader.option("startingVersion", start)
    if end is not None:
        reader = reader.option("endingVersion", end)
    rows = reader.load(path).collect()
    return sorted((r["id"], r["_change_type"], r["_commit_version"]) for r in rows)


def vacuum(spark: SparkSession, table: str, retain_zero: bool = False) -> None:
    """VACUUM with its START/END commits logged (optionally RETAIN 0 HOURS, check off)."""
    with spark_conf(
        spark,
        {
            "spark.databricks.delta.vacuum.logging.enabled": "true",
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
            # VACUUM lists files with this many tasks (default 10000): 20-40 s on a tiny table.
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        },
    ):
        spark.sql(f"VACUUM {table}" + (" RETAIN 0 HOURS" if retain_zero else ""))


def assert_window(window: ReplayWindow, earliest: int) -> None:
    """E is as expected, and every start below E breaks while every start from E does not."""
    assert window.earliest_replayable_version == earliest
    for start in range(window.latest_version + 2):
        assert (window.break_for(start) is None) == (start >= earliest), start


def test_vacuumed_change_data_files_break_the_window_at_their_commit(
    spark: SparkSession, lake: Path
) -> None:
    """Criterion 4: VACUUM deletes an aged _change_data file; commit timestamps stay young."""
    path = str(lake / "orders")
    retention = "'delta.deletedFileRetentionDuration' = 'interval 1 hours'"
    table = create(spark, path, f"{CDF_ON}, {NO_DV}, {retention}")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")  # 1
    spark.sql(f"UPDATE {table} SET id = 10 WHERE id = 1")  # 2: writes a cdc file
    spark.sql(f"INSERT INTO {table} VALUES (3)")  # 3
    (cdc,) = compute_replay_window(path).log.commit(2).cdcs
    # VACUUM treats _change_data files as untracked: deletable once their mtime is older than
    # deletedFileRetentionDuration, whatever RETAIN says.
    set_age(os.path.join(path, cdc.path), 2 * HOUR)
    vacuum(spark, table)  # 4: VACUUM START, 5: VACUUM END
    assert not os.path.exists(os.path.join(path, cdc.path))

    window = compute_replay_window(path)
    assert window.latest_version == 5
    assert_window(window, 3)
    found = window.break_for(1)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.FILES_MISSING, 2)
    assert cdc.path in found.detail
    assert window.break_for(2) == found
    with pytest.raises(Exception, match=MISSING_FILE):
        cdf_rows(spark, path, 2)
    assert cdf_rows(spark, path, 3) == [(3, "insert", 3)]
    assert assess_consumer(window, 0).replayable is False
    assert assess_consumer(window, 2).replayable is True

    # With the commits aged past the retention too, criterion 3 is reported first.
    for version in (0, 1, 2):
        set_age(commit_file(path, version), 2 * HOUR)
    aged = compute_replay_window(path).break_for(2)
    assert aged is not None
    assert (aged.kind, aged.version) == (WindowBreakKind.TIME_TRAVEL_LIMIT, 2)


def test_vacuumed_data_files_of_a_plain_insert_break_the_window(
    spark: SparkSession, lake: Path
) -> None:
    """Criterion 4: a commit without cdc files is read from its add/remove files."""
    path = str(lake / "orders")
    table = create(spark, path, f"{CDF_ON}, {NO_DV}")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")  # 1: add files only
    spark.sql(f"INSERT OVERWRITE {table} VALUES (5)")  # 2: removes 1's files, no cdc file
    spark.sql(f"INSERT INTO {table} VALUES (6)")  # 3
    before = compute_replay_window(path)
    assert before.log.commit(2).cdcs == ()
    assert_window(before, 0)
    vacuum(spark, table, retain_zero=True)  # 4, 5; deletes the tombstoned files of version 1

    window = compute_replay_window(path)
    assert_window(window, 3)
    # Version 1 may have written one file per task: the break names one of them.
    added = {add.path for add in window.log.commit(1).adds}
    found = window.break_for(1)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.FILES_MISSING, 1)
    assert any(path in found.detail for path in added)
    # Version 2 reads the removed files too: its delete rows come from them.
    at_two = window.break_for(2)
    assert at_two is not None
    assert (at_two.kind, at_two.version) == (WindowBreakKind.FILES_MISSING, 2)
    assert any(path in at_two.detail for path in added)
    with pytest.raises(Exception, match=MISSING_FILE):
        cdf_rows(spark, path, 1)
    assert cdf_rows(spark, path, 3) == [(6, "insert", 3)]


def test_deleted_commit_file_is_skipped_silently_by_spark(spark: SparkSession, lake: Path) -> None:
    """Criterion 2: a batch CDF read over a missing commit file returns without its changes."""
    path = str(lake / "orders")
    table = create(spark, path, f"{CDF_ON}, 'delta.checkpointInterval' = '3'")
    for i in range(1, 5):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")  # versions 1..4, checkpoint at 3
    assert cdf_rows(spark, path, 1) == [(i, "insert", i) for i in range(1, 5)]
    os.remove(commit_file(path, 2))

    # Spark: no error, and row 2 (version 2) is simply absent. This is silent data loss.
    assert cdf_rows(spark, path, 1, 4) == [(1, "insert", 1), (3, "insert", 3), (4, "insert", 4)]

    window = compute_replay_window(path)
    assert_window(window, 3)
    found = window.break_for(1)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.COMMIT_MISSING, 2)
    assert f"{2:020d}.json" in found.detail
    at_two = window.break_for(2)  # the snapshot at 2 needs commit 2 itself (no checkpoint <= 2)
    assert at_two is not None and at_two.kind is WindowBreakKind.SNAPSHOT_UNAVAILABLE
    assert cdf_rows(spark, path, 3) == [(3, "insert", 3), (4, "insert", 4)]
    report = assess_consumer(window, 0)
    assert report.window_break == found and not report.replayable
    assert report.data_version_lag == 3  # the gone commit cannot be counted
    assert report.headroom_hours == 0.0
    # W + 1 = 2 is gone: its time is bounded by the next surviving commit (lag a lower bound).
    bounded = assess_consumer(window, 1)
    assert not bounded.first_unprocessed_timestamp_exact
    assert bounded.first_unprocessed_timestamp == window.timestamp_of(3)
    assert bounded.first_unprocessed_timestamp == mtime(commit_file(path, 3))


def test_log_cleanup_behind_a_checkpoint_leaves_only_later_snapshots(
    spark: SparkSession, lake: Path
) -> None:
    """Criterion 1: early commits deleted (as log cleanup does); checkpoint 3 remains."""
    path = str(lake / "orders")
    table = create(spark, path, f"{CDF_ON}, 'delta.checkpointInterval' = '3'")
    for i in range(1, 5):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")
    for version in (0, 1):
        os.remove(commit_file(path, version))

    window = compute_replay_window(path)
    assert window.log.commit_versions() == (2, 3, 4)
    assert_window(window, 3)
    found = window.break_for(2)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.SNAPSHOT_UNAVAILABLE, 2)
    assert "commit 0 is gone" in found.detail
    assert window.break_for(1) is not None
    assert window.cdf_enabled_at_latest  # metadata read from checkpoint 3's checksum
    with pytest.raises(Exception, match="DELTA_TRUNCATED_TRANSACTION_LOG"):
        cdf_rows(spark, path, 2)
    assert cdf_rows(spark, path, 3) == [(3, "insert", 3), (4, "insert", 4)]


def test_time_travel_limit_applies_without_any_vacuum(spark: SparkSession, lake: Path) -> None:
    """Criterion 3: starts older than deletedFileRetentionDuration fail at load; the latest
    version is always allowed."""
    path = str(lake / "orders")
    retention = "'delta.deletedFileRetentionDuration' = 'interval 1 hours'"
    table = create(spark, path, f"{CDF_ON}, {retention}")
    for i in range(1, 5):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")
    for version, hours in ((0, 3.0), (1, 2.5), (2, 2.0)):
        set_age(commit_file(path, version), hours * HOUR)

    window = compute_replay_window(path)
    assert window.deleted_file_retention == timedelta(hours=1)
    assert_window(window, 3)
    found = window.break_for(2)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.TIME_TRAVEL_LIMIT, 2)
    at_one = window.break_for(1)
    assert at_one is not None
    assert (at_one.kind, at_one.version) == (WindowBreakKind.TIME_TRAVEL_LIMIT, 1)
    with pytest.raises(Exception, match="BEYOND_DELETED_FILE_RETENTION_DURATION"):
        cdf_rows(spark, path, 2)
    assert cdf_rows(spark, path, 3) == [(3, "insert", 3), (4, "insert", 4)]

    for version in (3, 4):
        set_age(commit_file(path, version), 1.5 * HOUR)
    window = compute_replay_window(path)
    assert_window(window, 4)  # only the latest version is left, and it is always allowed
    with pytest.raises(Exception, match="BEYOND_DELETED_FILE_RETENTION_DURATION"):
        cdf_rows(spark, path, 3)
    assert cdf_rows(spark, path, 4) == [(4, "insert", 4)]


def test_cdf_disabled_mid_range_and_re_enabled(spark: SparkSession, lake: Path) -> None:
    """Criterion 5: CDF off at v2, back on at v4: only starts from v4 are replayable."""
    path = str(lake / "orders")
    table = create(spark, path, CDF_ON)
    spark.sql(f"INSERT INTO {table} VALUES (1)")  # 1
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    spark.sql(f"INSERT INTO {table} VALUES (3)")  # 3: not recorded
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({CDF_ON})")  # 4
    spark.sql(f"INSERT INTO {table} VALUES (5)")  # 5

    window = compute_replay_window(path)
    assert window.cdf_enabled_at_latest
    assert_window(window, 4)
    found = window.break_for(1)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.CDF_DISABLED, 2)
    at_three = window.break_for(3)
    assert at_three is not None
    assert (at_three.kind, at_three.version) == (WindowBreakKind.CDF_DISABLED, 3)
    with pytest.raises(Exception, match="DELTA_MISSING_CHANGE_DATA") as failure:
        cdf_rows(spark, path, 1)
    assert "recorded for version [2]" in str(failure.value)
    assert cdf_rows(spark, path, 4) == [(5, "insert", 5)]


def test_cdf_enabled_after_creation_starts_the_window_there(
    spark: SparkSession, lake: Path
) -> None:
    """Criterion 5: changes before the enabling commit were never recorded."""
    path = str(lake / "orders")
    table = create(spark, path, "'delta.enableChangeDataFeed' = 'false'")
    spark.sql(f"INSERT INTO {table} VALUES (1)")  # 1
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({CDF_ON})")  # 2
    spark.sql(f"INSERT INTO {table} VALUES (3)")  # 3

    window = compute_replay_window(path)
    assert_window(window, 2)
    found = window.break_for(1)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.CDF_DISABLED, 1)
    with pytest.raises(Exception, match="DELTA_MISSING_CHANGE_DATA") as failure:
        cdf_rows(spark, path, 1)
    assert "recorded for version [1]" in str(failure.value)
    assert cdf_rows(spark, path, 2) == [(3, "insert", 3)]


def test_rename_and_drop_with_column_mapping_are_not_additive(
    spark: SparkSession, lake: Path
) -> None:
    """Criterion 6: ADD COLUMN is fine; RENAME (v4) and DROP (v6) split the window."""
    path = str(lake / "orders")
    mapping = (
        "'delta.columnMapping.mode' = 'name', 'delta.minReaderVersion' = '2', "
        "'delta.minWriterVersion' = '5'"
    )
    table = create(spark, path, f"{CDF_ON}, {mapping}", columns="id INT, name STRING")
    spark.sql(f"INSERT INTO {table} VALUES (1, 'a')")  # 1
    spark.sql(f"ALTER TABLE {table} ADD COLUMN (amount INT)")  # 2: additive
    spark.sql(f"INSERT INTO {table} VALUES (3, 'c', 30)")  # 3
    spark.sql(f"ALTER TABLE {table} RENAME COLUMN name TO label")  # 4
    spark.sql(f"INSERT INTO {table} VALUES (5, 'e', 50)")  # 5
    spark.sql(f"ALTER TABLE {table} DROP COLUMN amount")  # 6
    spark.sql(f"INSERT INTO {table} VALUES (7, 'g')")  # 7

    window = compute_replay_window(path)
    assert_window(window, 6)
    renamed = window.break_for(1)
    assert renamed is not None
    assert (renamed.kind, renamed.version) == (WindowBreakKind.SCHEMA_CHANGE, 4)
    assert "column name renamed to label" in renamed.detail
    assert window.break_for(3) == renamed
    dropped = window.break_for(4)
    assert dropped is not None
    assert (dropped.kind, dropped.version) == (WindowBreakKind.SCHEMA_CHANGE, 6)
    assert "column amount dropped" in dropped.detail
    with pytest.raises(Exception, match="DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE"):
        cdf_rows(spark, path, 1)
    with pytest.raises(Exception, match="DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA"):
        cdf_rows(spark, path, 4)
    assert cdf_rows(spark, path, 6) == [(7, "insert", 7)]


def _metadata(fields: list[dict[str, object]], partitions: tuple[str, ...] = ()) -> TableMetadata:
    return TableMetadata("id", {"type": "struct", "fields": fields}, partitions, {})


def _field(
    name: str, type_: object, nullable: bool = True, physical: str | None = None
) -> dict[str, object]:
    metadata = {"delta.columnMapping.physicalName": physical} if physical else {}
    return {"name": name, "type": type_, "nullable": nullable, "metadata": metadata}


def test_schema_changes_are_classified() -> None:
    base = [
        _field("id", "integer"),
        _field("s", {"type": "struct", "fields": [_field("a", "long")]}),
    ]
    assert non_additive_changes(_metadata(base), _metadata([*base, _field("n", "string")])) == []
    loosened = [_field("id", "integer", nullable=True)]
    assert (
        non_additive_changes(_metadata([_field("id", "integer", False)]), _metadata(loosened)) == []
    )
    assert non_additive_changes(_metadata(base), _metadata([_field("id", "string"), base[1]])) == [
        "column id changed type from int to string"
    ]
    nested_drop = [base[0], _field("s", {"type": "struct", "fields": []})]
    assert non_additive_changes(_metadata(base), _metadata(nested_drop)) == ["column s.a dropped"]
    assert non_additive_changes(
        _metadata([_field("id", "integer")]), _metadata([_field("id", "integer", False)])
    ) == ["column id made NOT NULL"]
    assert non_additive_changes(_metadata(base, ("id",)), _metadata(base)) == [
        "partition columns changed from ['id'] to []"
    ]
    # Enabling column mapping gives each column its own name as physical name: no change.
    mapped = [_field("id", "integer", physical="id"), _field("x", "integer", physical="col-1")]
    assert non_additive_changes(_metadata([base[0]]), _metadata(mapped)) == []
    renamed = [_field("ident", "integer", physical="id")]
    assert non_additive_changes(_metadata(mapped[:1]), _metadata(renamed)) == [
        "column id renamed to ident"
    ]


def test_lag_counts_from_the_first_unprocessed_commit(spark: SparkSession, lake: Path) -> None:
    """OPTIMIZE and VACUUM START/END count as versions but not as data changes; hours run from
    timestamp(W + 1), not from bronze's last commit."""
    path = str(lake / "orders")
    table = create(spark, path, f"{CDF_ON}, {NO_DV}")
    spark.sql(f"INSERT INTO {table} VALUES (1)")  # 1
    spark.sql(f"INSERT INTO {table} VALUES (2)")  # 2
    spark.sql(f"OPTIMIZE {table}")  # 3
    vacuum(spark, table)  # 4 VACUUM START, 5 VACUUM END
    for version, hours in ((0, 10), (1, 9), (2, 8), (3, 5), (4, 4), (5, 1)):
        set_age(commit_file(path, version), hours * HOUR)
    now = datetime.now(UTC)

    window = compute_replay_window(path, now=now)
    operations = [window.log.commit(v).operation for v in range(6)]
    assert operations[3:] == ["OPTIMIZE", "VACUUM START", "VACUUM END"]
    assert [window.log.commit(v).has_data_change for v in range(6)] == [
        False,
        True,
        True,
        False,
        False,
        False,
    ]
    after_data = assess_consumer(window, 2)
    assert (after_data.version_lag, after_data.data_version_lag) == (3, 0)
    assert after_data.first_unprocessed_version == 3
    assert after_data.lag_hours == pytest.approx(5.0, abs=0.01)
    assert after_data.first_unprocessed_timestamp == mtime(commit_file(path, 3))
    behind = assess_consumer(window, 0)
    assert (behind.version_lag, behind.data_version_lag) == (5, 2)
    assert behind.lag_hours == pytest.approx(9.0, abs=0.01)
    caught_up = assess_consumer(window, 5)
    assert (caught_up.version_lag, caught_up.data_version_lag, caught_up.lag_hours) == (0, 0, 0.0)
    assert caught_up.replayable and caught_up.headroom_hours is None
    fresh = assess_consumer(window, None)
    assert (fresh.version_lag, fresh.data_version_lag, fresh.replayable) == (6, 2, True)
    assert fresh.window_break is None and fresh.headroom_hours is None


def test_headroom_is_the_first_deadline(spark: SparkSession, lake: Path) -> None:
    """Retention of W + 1's commit, expiry of a needed tombstoned file, and log retention."""
    path = str(lake / "orders")
    retention = (
        "'delta.deletedFileRetentionDuration' = 'interval 10 hours', "
        "'delta.logRetentionDuration' = 'interval 20 hours'"
    )
    table = create(spark, path, f"{CDF_ON}, {NO_DV}, {retention}")
    spark.sql(f"INSERT INTO {table} VALUES (1), (2)")  # 1
    spark.sql(f"UPDATE {table} SET id = 10 WHERE id = 1")  # 2: cdc file
    spark.sql(f"INSERT OVERWRITE {table} VALUES (5)")  # 3: removes live files, no cdc
    spark.sql(f"INSERT INTO {table} VALUES (6)")  # 4
    set_age(commit_file(path, 1), 3 * HOUR)
    now = datetime.now(UTC)
    window = compute_replay_window(path, now=now)
    hours = timedelta(hours=1)

    behind = assess_consumer(window, 0)
    first = mtime(commit_file(path, 1))
    assert behind.headroom_hours == pytest.approx((first + 10 * hours - now) / hours)
    assert behind.headroom_hours == pytest.approx(7.0, abs=0.01)
    assert [d.kind for d in behind.deadlines] == [
        DeadlineKind.DELETED_FILE_RETENTION,
        DeadlineKind.TOMBSTONE_EXPIRY,
        DeadlineKind.LOG_RETENTION,
    ]
    assert behind.deadlines[2].at == first + 20 * hours

    # From version 3 the binding file is one its overwrite removed: removal time + retention.
    removals = [
        json.loads(line)["remove"]["deletionTimestamp"]
        for line in Path(commit_file(path, 3)).read_text().splitlines()
        if '"remove"' in line
    ]
    removed = datetime.fromtimestamp(min(removals) / 1000, tz=UTC)
    at_three = assess_consumer(window, 2)
    tombstone = next(d for d in at_three.deadlines if d.kind is DeadlineKind.TOMBSTONE_EXPIRY)
    assert tombstone.at == removed + 10 * hours
    expected = min(removed, mtime(commit_file(path, 3))) + 10 * hours
    assert at_three.headroom_hours == pytest.approx((expected - now) / hours)

    # Delta 4.4 refuses logRetentionDuration < deletedFileRetentionDuration unless told not to;
    # tables set up that way lose their log first.
    compatibility = "enforceDeletedFileAndLogRetentionDurationCompatibility"
    with spark_conf(spark, {f"spark.databricks.delta.vacuum.{compatibility}": "false"}):
        spark.sql(
            f"ALTER TABLE {table} SET TBLPROPERTIES "
            "('delta.logRetentionDuration' = 'interval 5 hours')"
        )
    short_log = assess_consumer(compute_replay_window(path, now=now), 0)
    assert short_log.deadlines[0].kind is DeadlineKind.LOG_RETENTION
    assert short_log.headroom_hours == pytest.approx(2.0, abs=0.01)


def test_missing_table_is_source_not_found(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFound):
        compute_replay_window(str(tmp_path / "nothing"))


def test_two_thousand_commits_are_assessed_from_the_log(spark: SparkSession, lake: Path) -> None:
    """How fast: bench scenario (d) times this check and `status` at up to 5,000 commits."""
    path = str(lake / "big")
    table = create(spark, path, CDF_ON)
    spark.sql(f"INSERT INTO {table} VALUES (1)")
    write_synthetic_commits(path, 2, 1999)

    window = compute_replay_window(path)
    report = assess_consumer(window, 0)

    assert window.latest_version == 1999
    assert window.earliest_replayable_version == 0
    assert (report.version_lag, report.data_version_lag, report.replayable) == (1999, 1999, True)
