"""The control tables stay a few files however many runs write them: every write that finds
more than COMPACT_AT_FILES files compacts the table, and every row is still read."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from deltalake import DeltaTable

from cdf_platform.state.control import COMPACT_AT_FILES, ControlTable, LoadLogEntry


def _entry(run: int, pipeline_id: str) -> LoadLogEntry:
    started = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=run)
    return LoadLogEntry(
        run_id=f"run-{run:03d}",
        pipeline_id=pipeline_id,
        mode="incremental",
        outcome="SUCCESS",
        started_at=started,
        finished_at=started + timedelta(seconds=5),
        start_version=run,
        end_version=run,
        watermark_before=run - 1,
        watermark_after=run,
    )


def test_a_fleets_runs_leave_the_control_tables_compact_and_every_row_readable(
    tmp_path: Path,
) -> None:
    control = ControlTable(str(tmp_path / "_control"))
    runs = 3 * COMPACT_AT_FILES
    for run in range(1, runs + 1):
        pipeline_id = f"p{run % 50:02d}"
        control.append_log(_entry(run, pipeline_id))
        control.upsert_state({"pipeline_id": pipeline_id, "last_commit_version": run})

    for path in (control.log_path, control.state_path):
        assert len(DeltaTable(path).file_uris()) <= COMPACT_AT_FILES + 1, path
    log = control.read_log()
    assert [row["run_id"] for row in log] == [f"run-{run:03d}" for run in range(1, runs + 1)]
    states = control.read_states()
    assert len(states) == 50
    assert {s["last_commit_version"] for s in states.values()} == set(range(runs - 49, runs + 1))
