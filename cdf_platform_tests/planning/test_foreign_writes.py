"""Foreign writes read from silver's log alone (`deltalake` writes, no Spark): which commits
count, where the search starts (a verification, a reconciling run, silver's first version),
and commits log cleanup removed."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.planning.foreign_writes import (
    SHOWN,
    Baseline,
    ForeignWrite,
    find_foreign_writes,
    summarize,
)
from cdf_platform.state.watermark import user_metadata


def _stamp(mode: str, pipeline_id: str = "orders") -> CommitProperties:
    """The `userMetadata` of a platform commit of `pipeline_id` by a run of `mode`."""
    metadata = user_metadata(pipeline_id=pipeline_id, run_id="r", mode=mode)
    return CommitProperties(custom_metadata={"userMetadata": metadata})


def _rows(*ids: int) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "amount": pa.array(ids, pa.int64())})


def _silver(tmp_path: Path) -> str:
    """Silver with a platform initial load (v0) and incremental run (v1), then a foreign
    append (v2), a property change (v3), a compaction (v4), a foreign delete (v5) and a
    commit stamped by another pipeline (v6)."""
    path = str(tmp_path / "silver")
    write_deltalake(path, _rows(1, 2), commit_properties=_stamp("initial_load"))
    write_deltalake(path, _rows(3), mode="append", commit_properties=_stamp("incremental"))
    write_deltalake(path, _rows(4), mode="append")
    table = DeltaTable(path)
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})
    table.optimize.compact()
    table.delete("id = 2")
    write_deltalake(path, _rows(5), mode="append", commit_properties=_stamp("incremental", "x"))
    return path


def test_writes_not_stamped_by_the_pipeline_that_change_data_are_foreign(tmp_path: Path) -> None:
    path = _silver(tmp_path)

    found = find_foreign_writes(path, "orders", verified=None)

    assert found.summary == "v2 WRITE, v5 DELETE, v6 WRITE"
    assert (found.baseline, found.baseline_version, found.searched_from) == (
        Baseline.REBUILD,
        0,
        1,
    )
    assert not found.log_cleaned and found.note is None


def test_the_search_starts_after_the_newest_of_verification_and_reconciling_run(
    tmp_path: Path,
) -> None:
    path = _silver(tmp_path)
    verified = find_foreign_writes(path, "orders", verified=2)
    assert (verified.summary, verified.baseline, verified.searched_from) == (
        "v5 DELETE, v6 WRITE",
        Baseline.VERIFIED,
        3,
    )
    # A rebuild after the verification reconciles silver: nothing before it counts.
    write_deltalake(path, _rows(1), mode="overwrite", commit_properties=_stamp("rebuild"))
    rebuilt = find_foreign_writes(path, "orders", verified=2)
    assert (rebuilt.writes, rebuilt.baseline, rebuilt.baseline_version) == ((), Baseline.REBUILD, 7)
    assert find_foreign_writes(path, "orders", verified=7).baseline is Baseline.VERIFIED


def test_a_silver_without_platform_commits_is_searched_from_its_first_version(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "silver")
    write_deltalake(path, _rows(1))
    found = find_foreign_writes(path, "orders", verified=None)
    assert (found.summary, found.baseline, found.searched_from) == ("v0 WRITE", Baseline.FIRST, 0)
    assert find_foreign_writes(str(tmp_path / "none"), "orders", verified=None).writes == ()


def test_commits_gone_by_log_cleanup_are_said_so_and_the_rest_searched(tmp_path: Path) -> None:
    path = _silver(tmp_path)
    DeltaTable(path).create_checkpoint()  # at v6
    for version in range(3):  # log cleanup took the initial load and the first foreign write
        os.remove(Path(path) / "_delta_log" / f"{version:020d}.json")

    found = find_foreign_writes(path, "orders", verified=None)

    assert found.summary == "v5 DELETE, v6 WRITE"
    assert (found.baseline, found.searched_from, found.log_cleaned) == (Baseline.FIRST, 3, True)
    assert found.note is not None and "searched from v3, the oldest left" in found.note
    # A verification after the gap vouches for what came before: nothing is missing then.
    assert not find_foreign_writes(path, "orders", verified=4).log_cleaned


def test_no_commit_before_the_verified_version_is_read(tmp_path: Path) -> None:
    path = _silver(tmp_path)
    log = DeltaLog(path)  # lists the log once: versions 0..6
    for version in range(5):  # gone after the listing: reading any of them would fail
        os.remove(Path(path) / "_delta_log" / f"{version:020d}.json")

    found = find_foreign_writes(log, "orders", verified=4)

    assert (found.summary, found.searched_from, found.log_cleaned) == (
        "v5 DELETE, v6 WRITE",
        5,
        False,
    )


def test_a_line_names_the_oldest_writes_and_counts_the_rest() -> None:
    writes = tuple(ForeignWrite(v, "WRITE", 0) for v in range(SHOWN + 3))
    assert summarize(writes) == ", ".join(f"v{v} WRITE" for v in range(SHOWN)) + " and 3 more"
    assert summarize(writes[:2]) == "v0 WRITE, v1 WRITE"
    assert summarize(()) is None
