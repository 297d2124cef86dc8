"""The control tables stay a few files however many runs write them: every write that finds
more than COMPACT_AT_FILES files compacts the table, and every row is still read. A load log
written before a column was added is read (the column null) and appended to."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from deltalake import DeltaTable

from cdf_platform.deltalog.arrow_rows import arrow_table
from cdf_platform.deltalog.delta_tables import write_delta_table
from cdf_platform.state.control import COMPACT_AT_FILES, ControlTable, LoadLogEntry
from cdf_platform.state.load_log import LOG_SCHEMA, OrchestratorTimes, RunStages

MARK_COLUMNS = ("created_at", "dequeued_at", "launched_at", "planned_at", "read_at", "committed_at")


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


def test_a_load_log_written_before_the_stage_marks_is_read_and_appended_to(
    tmp_path: Path,
) -> None:
    # The log as the version before the stage marks wrote it: no mark column.
    control = ControlTable(str(tmp_path / "_control"))
    old_schema = {name: kind for name, kind in LOG_SCHEMA.items() if name not in MARK_COLUMNS}
    old_row = {k: v for k, v in _entry(1, "orders").as_row().items() if k in old_schema}
    write_delta_table(
        control.log_path, control.storage, arrow_table(old_schema, [old_row]), mode="append"
    )

    (read,) = control.read_log("orders")
    assert {name: read[name] for name in MARK_COLUMNS} == dict.fromkeys(MARK_COLUMNS)

    entry = _entry(2, "orders")
    started = entry.started_at
    marks = RunStages(
        started,
        planned_at=started + timedelta(seconds=1),
        read_at=started + timedelta(seconds=2),
        committed_at=started + timedelta(seconds=3),
        orchestrator=OrchestratorTimes(created_at=started - timedelta(seconds=2)),
    )
    control.append_log(replace(entry, stages=marks))

    old, new = control.read_log("orders")
    assert old["run_id"] == "run-001" and old["planned_at"] is None
    assert new["planned_at"] == started + timedelta(seconds=1)
    assert new["committed_at"] == started + timedelta(seconds=3)
    assert new["created_at"] == started - timedelta(seconds=2)
    assert (new["dequeued_at"], new["launched_at"]) == (None, None)
    assert RunStages.of_row(new).seconds() == {
        "queue": None,
        "launch": 2.0,  # created -> started (no launch recorded)
        "plan": 1.0,
        "read": 1.0,
        "merge": 1.0,
        "end": 2.0,  # the entry finished 5 s after it started
    }
