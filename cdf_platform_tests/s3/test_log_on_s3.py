"""The JVM-free log reader on a real S3 server: the same answers as on a local folder, from one
listing of the log, one of the table, and batched commit reads."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import CatalogManagedSource
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.storage import ENVIRONMENT_ONLY
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.table_storage import LIST_PAGE_SIZE, ObjectStorage, open_storage
from cdf_platform.deltalog.tables import holds_foreign_files, is_delta_table
from cdf_platform.planning.assessment import assess_pipeline
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform.window.criteria import WindowBreakKind
from cdf_platform.window.replay_window import compute_replay_window
from cdf_platform_testkit.objects import delete_object, object_names, put_object, upload_folder
from cdf_platform_testkit.synthetic_log import write_synthetic_commits
from cdf_platform_tests.bronze import insert, make_bronze, sql


def pages(keys: int) -> int:
    """Pages (requests) of a listing of `keys` objects; an empty listing is one request."""
    return max(1, -(-keys // LIST_PAGE_SIZE))


def _bronze_copied_to_s3(spark: SparkSession, lake: Path, s3_lake: str) -> tuple[str, str]:
    """A local bronze table and its copy on S3: versions 0 create, 1 insert, 2 update (cdc
    files), 3 delete (cdc files), 4 insert."""
    local, remote = str(lake / "bronze"), f"{s3_lake}/bronze"
    make_bronze(spark, local, [(1, "ada", 10), (2, "bob", 20)])
    sql(spark, local, "UPDATE {t} SET amount = 11 WHERE id = 1")
    sql(spark, local, "DELETE FROM {t} WHERE id = 2")
    insert(spark, local, [(3, "cy", 30)])
    upload_folder(local, remote)
    return local, remote


def test_a_table_copied_to_s3_reads_as_it_does_locally(
    spark: SparkSession, lake: Path, s3_lake: str
) -> None:
    local, remote = _bronze_copied_to_s3(spark, lake, s3_lake)

    here, there = DeltaLog(local), DeltaLog(remote)
    assert there.table_path == remote
    assert there.commit_versions() == here.commit_versions() == (0, 1, 2, 3, 4)
    assert there.table_id() == here.table_id()
    assert there.latest_protocol() == here.latest_protocol()
    for version in here.commit_versions():
        mine, theirs = here.commit(version), there.commit(version)
        assert theirs.operation == mine.operation
        assert theirs.files_read_by_cdf() == mine.files_read_by_cdf()
    assert there.table_files == here.table_files
    window = compute_replay_window(remote)
    assert window.earliest_replayable_version == 0
    assert window.break_for(1) is None


def test_a_vanished_change_file_on_s3_breaks_the_window_at_its_commit(
    spark: SparkSession, lake: Path, s3_lake: str
) -> None:
    local, remote = _bronze_copied_to_s3(spark, lake, s3_lake)
    (cdc,) = [a.path for a in DeltaLog(local).commit(3).files_read_by_cdf()]
    delete_object(remote, cdc)

    window = compute_replay_window(remote)
    found = window.break_for(2)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.FILES_MISSING, 3)
    assert cdc in found.detail
    assert window.earliest_replayable_version == 4


def test_a_long_log_is_listed_once_and_read_in_a_few_sweeps(
    spark: SparkSession, lake: Path, s3_lake: str, s3_server: LocalS3Server
) -> None:
    local = str(lake / "bronze")
    make_bronze(spark, local, [(1, "ada", 10)])
    write_synthetic_commits(local, 2, 1_199)
    remote = f"{s3_lake}/bronze"
    upload_folder(local, remote)

    storage = open_storage(remote, ENVIRONMENT_ONLY)
    assert isinstance(storage, ObjectStorage)
    answered_before = s3_server.request_count()
    window = compute_replay_window(remote, log=DeltaLog(remote, storage))
    assert window.latest_version == 1_199
    assert window.earliest_replayable_version == 0
    answered = s3_server.request_count() - answered_before
    # _delta_log is listed once (1,200 commits + checksums: a few pages), and the table's
    # other objects once, around the log: the pages up to the first log key, then the pages
    # past the log. One GET per commit and checksum read, never one per data file (1,600).
    names = object_names(remote)
    log_pages = pages(sum(name.startswith("_delta_log/") for name in names))
    before_log = sum(name < "_delta_log/" for name in names)
    after_log = sum(name > "_delta_log0" for name in names)
    assert after_log > LIST_PAGE_SIZE  # the data files span pages
    assert storage.requests.lists == log_pages + before_log // LIST_PAGE_SIZE + 1 + pages(after_log)
    assert storage.requests.gets == 1_200
    # In 5 concurrent sweeps (a walk down the log reads ahead in doubling blocks), not one
    # per FETCH_BATCH commits.
    assert storage.requests.batches == 5
    # The storage layer's count is the server's.
    assert answered == storage.requests.lists + storage.requests.gets

    # The next evaluation reads the commits from the local cache (same names, same ETags)
    # and fetches only the one committed since.
    write_synthetic_commits(local, 1_200, 1_200)
    upload_folder(local, remote)
    again = open_storage(remote, ENVIRONMENT_ONLY)
    window = compute_replay_window(remote, log=DeltaLog(remote, again))
    assert window.latest_version == 1_200
    assert window.earliest_replayable_version == 0
    assert again.requests.gets == 1


def test_a_rewritten_commit_object_is_read_again_not_served_from_the_cache(
    spark: SparkSession, lake: Path, s3_lake: str
) -> None:
    local, remote = _bronze_copied_to_s3(spark, lake, s3_lake)
    assert DeltaLog(remote).commit(4).operation == "WRITE"  # cached now
    # The same name with other bytes (a table recreated in place): a new ETag.
    body = Path(local, "_delta_log", f"{4:020d}.json").read_text()
    put_object(remote, f"_delta_log/{4:020d}.json", body.replace('"WRITE"', '"MERGE"').encode())
    assert DeltaLog(remote).commit(4).operation == "MERGE"


def test_table_facts_on_s3(s3_lake: str, spark: SparkSession, lake: Path) -> None:
    assert not is_delta_table(f"{s3_lake}/nothing", ENVIRONMENT_ONLY)
    assert not holds_foreign_files(f"{s3_lake}/nothing", ENVIRONMENT_ONLY)
    (lake / "export.csv").write_text("id\n1\n")
    upload_folder(lake, f"{s3_lake}/foreign")  # a file, no _delta_log
    assert holds_foreign_files(f"{s3_lake}/foreign", ENVIRONMENT_ONLY)
    make_bronze(spark, str(lake / "t"), [(1, "ada", 10)])
    upload_folder(lake / "t", f"{s3_lake}/t")
    assert is_delta_table(f"{s3_lake}/t", ENVIRONMENT_ONLY)
    assert not holds_foreign_files(f"{s3_lake}/t", ENVIRONMENT_ONLY)
    # s3:// and s3a:// name the same objects.
    assert is_delta_table(f"{s3_lake.replace('s3a://', 's3://')}/t", ENVIRONMENT_ONLY)


@pytest.mark.parametrize("feature", ["catalogManaged", "catalogOwned-preview"])
def test_a_catalog_managed_bronze_table_is_refused(
    feature: str, spark: SparkSession, lake: Path, s3_lake: str
) -> None:
    local = str(lake / "bronze")
    make_bronze(spark, local, [(1, "ada", 10)])
    # What a catalog-managed table's log says (Delta protocol, "Catalog-managed tables"): the
    # feature in both lists, with in-commit timestamps it requires.
    commit = Path(local, "_delta_log", f"{2:020d}.json")
    commit.write_text(
        '{"commitInfo":{"operation":"UPGRADE PROTOCOL","inCommitTimestamp":1}}\n'
        '{"protocol":{"minReaderVersion":3,"minWriterVersion":7,'
        f'"readerFeatures":["{feature}"],'
        f'"writerFeatures":["{feature}","inCommitTimestamp"]}}}}\n'
    )
    remote = f"{s3_lake}/bronze"
    upload_folder(local, remote)
    for source in (local, remote):
        spec = PipelineSpec(id="people", source=source, target=f"{s3_lake}/silver", keys=["id"])
        assessment = assess_pipeline(spec, known_source_id=None)
        assert assessment.blocking
        assert isinstance(assessment.problem, CatalogManagedSource)
        assert feature in str(assessment.problem)
        assert "path-based" in str(assessment.problem)
