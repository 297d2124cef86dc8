"""The JVM-free `_delta_log` reader against real delta-spark tables: actions, timestamps as Delta
uses them, checkpoints, metadata from checkpoints, deletion-vector files, intervals."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import SourceLogDamaged, SourceNotFound
from cdf_platform.core.sql import sql_path
from cdf_platform.deltalog.actions import DeletionVector, decode_action_path, z85_decode
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.retention import parse_interval
from cdf_platform_testkit.synthetic_log import write_synthetic_commits
from cdf_platform_tests.bronze import make_bronze

HOUR = 3600.0


def commit_file(table: str, version: int) -> str:
    """Path of the commit file of `version`."""
    return os.path.join(table, "_delta_log", f"{version:020d}.json")


def age_file(path: str, seconds_ago: float) -> None:
    """Set a file's modification time `seconds_ago` seconds before now."""
    moment = time.time() - seconds_ago
    os.utime(path, (moment, moment))


def forget_cached_logs(spark: SparkSession) -> None:
    """Drop delta-spark's cached DeltaLog instances, so Spark re-lists files we changed."""
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def cdf_rows(spark: SparkSession, table: str, start: int) -> list[tuple[object, ...]]:
    """(id, _change_type, _commit_version) rows of a batch CDF read from `start`."""
    df = spark.read.format("delta").option("readChangeFeed", "true")
    rows = df.option("startingVersion", start).load(table).collect()
    return sorted((r["id"], r["_change_type"], r["_commit_version"]) for r in rows)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("interval 7 days", timedelta(days=7)),
        ("interval 168 hours", timedelta(hours=168)),
        ("interval 1 weeks", timedelta(weeks=1)),
        ("interval 1 week", timedelta(weeks=1)),
        ("30 days", timedelta(days=30)),
        ("interval 2 hours 30 minutes", timedelta(hours=2, minutes=30)),
        ("INTERVAL 1 DAY 12 HOURS", timedelta(days=1, hours=12)),
        ("  interval 90 seconds ", timedelta(seconds=90)),
        ("interval 0 hours", timedelta(0)),
    ],
)
def test_delta_intervals_are_parsed(text: str, expected: timedelta) -> None:
    assert parse_interval(text) == expected


@pytest.mark.parametrize(
    "text", ["interval 1 month", "2 years", "7 fortnights", "", "interval", "seven days", "1 day x"]
)
def test_intervals_delta_refuses_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_interval(text)


def test_z85_and_action_paths_are_decoded() -> None:
    # The test vector of the ZeroMQ Z85 spec (rfc.zeromq.org/spec/32).
    assert z85_decode("HelloWorld") == bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
    assert decode_action_path("a%20b/part-0.parquet") == "a b/part-0.parquet"
    # Hive escapes ':' in a partition folder as %3A; the log URL-encodes that '%' once more.
    assert decode_action_path("c=%253A/part-0.parquet") == "c=%3A/part-0.parquet"
    assert decode_action_path("file:/lake/t/x%20y.parquet") == "/lake/t/x y.parquet"
    assert decode_action_path("s3a://bucket/t/x.parquet") == "s3a://bucket/t/x.parquet"


def test_deletion_vector_files_resolve_as_the_protocol_says() -> None:
    # The examples of PROTOCOL.md, "Deletion Vector Descriptor".
    relative = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "cardinality": 6}
    vector = DeletionVector.from_action(relative, "/lake/t")
    assert vector.file_path == "/lake/t/ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    absolute = {
        "storageType": "p",
        "pathOrInlineDv": "file:/lake/t/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin",
    }
    vector = DeletionVector.from_action(absolute, "/lake/t")
    assert vector.file_path == "/lake/t/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"
    inline = {
        "storageType": "i",
        "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72lkbi5=-{L",
    }
    assert DeletionVector.from_action(inline, "/lake/t").file_path is None


def test_a_folder_without_delta_log_is_source_not_found(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFound, match="no _delta_log folder"):
        DeltaLog(str(tmp_path / "nowhere"))
    (tmp_path / "empty" / "_delta_log").mkdir(parents=True)
    with pytest.raises(SourceNotFound, match="or an empty one"):
        DeltaLog(str(tmp_path / "empty"))
    (tmp_path / "empty" / "_delta_log" / "00000000000000000000.json.tmp").write_text("{}")
    with pytest.raises(SourceNotFound, match="no Delta commit or checkpoint"):
        DeltaLog(str(tmp_path / "empty"))


@pytest.mark.parametrize(
    ("body", "cause"),
    [(b"{not json", "JSONDecodeError"), (b'{"add": {"size": 1}}', "KeyError")],
)
def test_a_commit_file_that_holds_no_delta_actions_is_a_damaged_log(
    tmp_path: Path, body: bytes, cause: str
) -> None:
    log = tmp_path / "t" / "_delta_log"
    log.mkdir(parents=True)
    protocol = {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}}
    (log / f"{0:020d}.json").write_text(json.dumps(protocol) + "\n")
    (log / f"{1:020d}.json").write_bytes(body)
    with pytest.raises(SourceLogDamaged, match=f"commit 1 is not a Delta commit file \\({cause}"):
        DeltaLog(str(tmp_path / "t")).commit(1)


def test_commits_are_read_as_delta_wrote_them(spark: SparkSession, lake: Path) -> None:
    """Operations, actions, dataChange flags, cdc files, metadata and deletion-vector files."""
    path = str(lake / "people")
    table = sql_path(path)
    spark.sql(
        f"CREATE TABLE {table} (id INT, name STRING) USING DELTA TBLPROPERTIES ("
        "'delta.enableChangeDataFeed' = 'true', 'delta.enableDeletionVectors' = 'false')"
    )
    spark.sql(f"INSERT INTO {table} VALUES (1, 'ada'), (2, 'bob')")  # 1
    spark.sql(f"UPDATE {table} SET name = 'ada2' WHERE id = 1")  # 2: cdc file
    spark.sql(f"OPTIMIZE {table}")  # 3: no data change
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"INSERT INTO {table} VALUES (3, 'cy'), (4, 'dee')")  # 5: one file
    spark.sql(f"OPTIMIZE {table}")  # 6: one file holding ids 1..4
    spark.sql(f"DELETE FROM {table} WHERE id = 3")  # 7: deletion vector, no cdc file

    log = DeltaLog(path)
    assert log.commit_versions() == tuple(range(8))
    assert log.latest_version() == 7
    commits = [log.commit(v) for v in range(8)]
    assert [c.operation for c in commits] == [
        "CREATE TABLE",
        "WRITE",
        "UPDATE",
        "OPTIMIZE",
        "SET TBLPROPERTIES",
        "WRITE",
        "OPTIMIZE",
        "DELETE",
    ]
    assert [c.has_data_change for c in commits] == [
        False,
        True,
        True,
        False,
        False,
        True,
        False,
        True,
    ]
    update = commits[2]
    assert len(update.cdcs) == 1 and update.cdcs[0].path.startswith("_change_data/")
    assert update.files_read_by_cdf() == update.cdcs  # cdc files replace add/remove
    assert all(log.file_exists(a.path) for a in (*update.adds, *update.removes, *update.cdcs))
    assert commits[3].files_read_by_cdf() == ()  # OPTIMIZE: dataChange=false only
    assert commits[0].metadata is not None and commits[0].metadata.cdf_enabled
    assert log.properties_at(3)["delta.enableDeletionVectors"] == "false"
    assert log.properties()["delta.enableDeletionVectors"] == "true"
    assert log.table_id() == commits[0].metadata.table_id

    # The DELETE removes the file and re-adds it with a 'u' deletion vector whose file we find.
    delete = commits[7]
    (dv_add,) = [a for a in delete.adds if a.deletion_vector is not None]
    vector = dv_add.deletion_vector
    assert vector is not None and vector.storage_type == "u" and vector.cardinality == 1
    assert vector.file_path is not None and os.path.isfile(vector.file_path)
    assert os.path.basename(vector.file_path).startswith("deletion_vector_")
    assert log.file_exists(vector.file_path)
    assert {a.path for a in delete.files_read_by_cdf()} == {dv_add.path}
    # ...and the change feed Spark derives from it is the deleted row.
    assert cdf_rows(spark, path, 7) == [(3, "delete", 7)]


def test_timestamp_is_the_commit_file_mtime_unless_in_commit_timestamps(
    spark: SparkSession, lake: Path
) -> None:
    """Delta's retention check reads Snapshot.timestamp: the in-commit timestamp if the table
    has them, else the commit file's modification time (commitInfo.timestamp is unused)."""
    plain, ict = str(lake / "plain"), str(lake / "ict")
    for path, ict_on in ((plain, "false"), (ict, "true")):
        spark.sql(
            f"CREATE TABLE {sql_path(path)} (id INT) USING DELTA TBLPROPERTIES ("
            "'delta.enableChangeDataFeed' = 'true', "
            "'delta.deletedFileRetentionDuration' = 'interval 1 hours', "
            f"'delta.enableInCommitTimestamps' = '{ict_on}')"
        )
        for i in range(3):
            spark.sql(f"INSERT INTO {sql_path(path)} VALUES ({i})")
        age_file(commit_file(path, 1), 2 * HOUR)
    forget_cached_logs(spark)

    plain_log, ict_log = DeltaLog(plain), DeltaLog(ict)
    mtime_ms = os.stat(commit_file(plain, 1)).st_mtime_ns // 1_000_000
    assert plain_log.commit_timestamp_ms(1) == mtime_ms
    assert plain_log.commit(1).in_commit_timestamp_ms is None
    with pytest.raises(Exception, match="BEYOND_DELETED_FILE_RETENTION_DURATION"):
        cdf_rows(spark, plain, 1)

    ict_commit = ict_log.commit(1)
    assert ict_commit.in_commit_timestamp_ms is not None
    assert ict_commit.timestamp_ms == ict_commit.in_commit_timestamp_ms
    assert ict_commit.timestamp_ms > ict_commit.file_modification_ms + HOUR * 1000
    assert cdf_rows(spark, ict, 1) == [(0, "insert", 1), (1, "insert", 2), (2, "insert", 3)]

    # On a plain table with monotone mtimes, DESCRIBE HISTORY shows the same timestamps.
    history = spark.sql(f"DESCRIBE HISTORY {sql_path(plain)}").collect()
    by_version = {r["version"]: int(r["timestamp"].timestamp() * 1000) for r in history}
    assert by_version[2] == plain_log.commit_timestamp_ms(2)


def test_checkpoints_and_metadata_from_a_checkpoint(spark: SparkSession, lake: Path) -> None:
    """Metadata only in a checkpoint is read from its .crc, else through deltalake."""
    path = str(lake / "events")
    table = sql_path(path)
    spark.sql(
        f"CREATE TABLE {table} (id INT) USING DELTA TBLPROPERTIES ("
        "'delta.enableChangeDataFeed' = 'true', 'delta.checkpointInterval' = '3', "
        "'delta.deletedFileRetentionDuration' = 'interval 36 hours')"
    )
    for i in range(4):
        spark.sql(f"INSERT INTO {table} VALUES ({i})")
    log_dir = os.path.join(path, "_delta_log")
    expected = DeltaLog(path).metadata_at(4)
    for version in (0, 1):
        os.remove(commit_file(path, version))

    log = DeltaLog(path)
    assert log.checkpoint_versions() == (3,)
    assert log.commit_versions() == (2, 3, 4)
    assert log.metadata_at(2) is None  # commits 0, 1 gone and no checkpoint <= 2
    assert log.snapshot_gap(2) == 0 and log.snapshot_gap(3) is None
    assert log.metadata_at(4) == expected  # from 00000000000000000003.crc
    assert log.deleted_file_retention() == timedelta(hours=36)
    assert log.log_retention() == timedelta(days=30)

    os.remove(os.path.join(log_dir, f"{3:020d}.crc"))
    assert DeltaLog(path).metadata_at(4) == expected  # from the parquet checkpoint, via deltalake

    # A multi-part checkpoint counts only with all its parts.
    part = os.path.join(log_dir, f"{4:020d}.checkpoint.{{}}.0000000002.parquet")
    Path(part.format("0000000001")).touch()
    assert DeltaLog(path).checkpoint_versions() == (3,)
    Path(part.format("0000000002")).touch()
    assert DeltaLog(path).checkpoint_versions() == (3, 4)
    uuid_named = os.path.join(log_dir, f"{5:020d}.checkpoint.{'0' * 8}-{'0' * 4}-{'0' * 4}-")
    Path(uuid_named + f"{'0' * 4}-{'0' * 12}.json").touch()
    assert DeltaLog(path).checkpoint_versions() == (3, 4, 5)


def test_file_listing_is_done_once(spark: SparkSession, lake: Path) -> None:
    path = str(lake / "once")
    spark.sql(f"CREATE TABLE {sql_path(path)} (id INT) USING DELTA")
    spark.sql(f"INSERT INTO {sql_path(path)} VALUES (1)")
    log = DeltaLog(path)
    (add,) = log.commit(1).adds
    assert log.file_exists(add.path) and log.file_exists(os.path.join(path, add.path))
    os.remove(os.path.join(path, add.path))
    assert log.file_exists(add.path)  # the listing is a snapshot taken on first use
    assert not DeltaLog(path).file_exists(add.path)
    assert not log.file_exists("_delta_log/00000000000000000000.json")  # the log is not data


def test_a_walk_along_a_long_log_reads_ahead_in_doubling_blocks(
    spark: SparkSession, lake: Path
) -> None:
    path = str(lake / "long")
    make_bronze(spark, path, [(1, "ada", 10)])
    write_synthetic_commits(path, 2, 1_199)

    down = DeltaLog(path)
    for version in reversed(down.commit_versions()):
        down.commit(version)
    # 1199 alone: 64 below it; then blocks of 128, 256, 512 and the 239 left of 1,024.
    assert (down.storage.requests.gets, down.storage.requests.batches) == (1_200, 5)

    up = DeltaLog(path)
    for version in up.commit_versions()[100:]:
        up.commit(version)
    # 100 alone: 64 on each side (36..164); then 128, 256, 512 and the 139 left above.
    assert (up.storage.requests.gets, up.storage.requests.batches) == (
        129 + 128 + 256 + 512 + 139,
        5,
    )

    scattered = DeltaLog(path)
    for version in (1_000, 500, 10):
        scattered.commit(version)
    # Lookups far apart read FETCH_BATCH on each side, never a growing block.
    assert (scattered.storage.requests.gets, scattered.storage.requests.batches) == (
        129 + 129 + 75,
        3,
    )

    # A new walk starts small wherever the last one grew: 365 is next to a read commit (364)
    # but not past the end of the last block (751..1006), so it reads 64 commits, not 512.
    walks = DeltaLog(path)
    walks.commit(300)  # 236..364
    for version in range(1_199, 900, -1):  # 1135..1199, 1007..1134, 751..1006
        walks.commit(version)
    assert walks.storage.requests.gets == 129 + 65 + 128 + 256
    walks.commit(365)
    assert walks.storage.requests.gets == 129 + 65 + 128 + 256 + 64
