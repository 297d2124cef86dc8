"""The control tables on S3: concurrent runs of different pipelines write them at once, and
deltalake's conditional PUT lets every commit land exactly once."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from cdf_platform.state.control import ControlTable, LoadLogEntry
from cdf_platform_testkit.objects import object_names

WRITERS = 6


def _record(control: ControlTable, index: int) -> None:
    pipeline_id = f"p{index}"
    now = datetime.now(UTC)
    control.append_log(
        LoadLogEntry(
            run_id=f"run-{index}",
            pipeline_id=pipeline_id,
            mode="incremental",
            outcome="SUCCESS",
            started_at=now,
            finished_at=now,
            end_version=index,
        )
    )
    control.upsert_state({"pipeline_id": pipeline_id, "last_commit_version": index})


def test_concurrent_control_writes_on_s3_all_land(s3_lake: str) -> None:
    control = ControlTable(f"{s3_lake}/_control")
    control.ensure()
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(lambda index: _record(control, index), range(WRITERS)))

    states = control.read_states()
    assert {p: s["last_commit_version"] for p, s in states.items()} == {
        f"p{i}": i for i in range(WRITERS)
    }
    assert sorted(row["run_id"] for row in control.read_log()) == [
        f"run-{i}" for i in range(WRITERS)
    ]
    # One commit per write, none lost or doubled: create + one append per writer.
    log_commits = [
        name for name in object_names(control.log_path, "_delta_log") if name.endswith(".json")
    ]
    assert len(log_commits) == 1 + WRITERS
