"""The control tables stay a few files however many runs write them: every write that finds
more than COMPACT_AT_FILES files compacts the table, and every row is still read. A load log
written before a column was added is read (the column null) and appended to, a state table
so takes an upsert; a control table object reads what other writers committed since."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

import cdf_platform.state.control as control_module
from cdf_platform.core.errors import ConcurrentWriteConflict
from cdf_platform.deltalog.arrow_rows import arrow_table
from cdf_platform.deltalog.delta_tables import write_delta_table
from cdf_platform.state.control import STATE_SCHEMA, ControlTable, LoadLogEntry
from cdf_platform.state.load_log import LOG_SCHEMA, OrchestratorTimes, RunStages
from cdf_platform.state.row_tables import COMPACT_AT_FILES, retry_on_conflict

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


def test_a_state_table_written_before_a_column_takes_it_and_keeps_one_row_per_pipeline(
    tmp_path: Path,
) -> None:
    control = ControlTable(str(tmp_path / "_control"))
    old_schema = {name: kind for name, kind in STATE_SCHEMA.items() if name != "spec_record"}
    rows = [{"pipeline_id": "o'brien", "last_commit_version": 1}, {"pipeline_id": "b"}]
    write_delta_table(
        control.state_path, control.storage, arrow_table(old_schema, rows), mode="append"
    )

    control.upsert_state({"pipeline_id": "o'brien", "last_commit_version": 2, "spec_record": "{}"})
    control.upsert_state({"pipeline_id": "c", "last_commit_version": 7})

    states = control.read_states()
    assert sorted(states) == ["b", "c", "o'brien"]
    assert (states["o'brien"]["last_commit_version"], states["o'brien"]["spec_record"]) == (2, "{}")
    assert (states["b"]["last_commit_version"], states["b"]["spec_record"]) == (None, None)


def test_a_control_table_object_reads_what_others_wrote_since_its_last_read(
    tmp_path: Path,
) -> None:
    # One object per process of a deployment: each reads the other's rows as they land.
    ours, theirs = (ControlTable(str(tmp_path / "_control")) for _ in range(2))
    ours.upsert_state({"pipeline_id": "a", "last_commit_version": 1})
    assert ours.read_states()["a"]["last_commit_version"] == 1

    theirs.upsert_state({"pipeline_id": "a", "last_commit_version": 2})
    theirs.append_log(_entry(2, "a"))
    ours.upsert_state({"pipeline_id": "b", "last_commit_version": 5})
    ours.append_log(_entry(3, "b"))

    for control in (ours, theirs):
        states = control.read_states()
        assert {i: s["last_commit_version"] for i, s in states.items()} == {"a": 2, "b": 5}
        assert [row["run_id"] for row in control.read_log()] == ["run-002", "run-003"]
    assert len(DeltaTable(ours.state_path).file_uris()) == 2


def _versions(control: ControlTable) -> tuple[int, int]:
    return DeltaTable(control.log_path).version(), DeltaTable(control.state_path).version()


def test_held_writes_are_read_by_their_object_and_written_in_one_commit_per_table(
    tmp_path: Path,
) -> None:
    root = str(tmp_path / "_control")
    control = ControlTable(root)
    control.ensure()
    before = _versions(control)
    control.append_log(_entry(1, "p01"))  # not held: a commit of its own
    ids = [f"p{n:02d}" for n in range(2, 7)]
    with control.holding_writes():
        for run, pipeline_id in enumerate(ids, start=2):
            control.append_log(_entry(run, pipeline_id))
            control.upsert_state({"pipeline_id": pipeline_id, "last_commit_version": run})
        control.upsert_state({"pipeline_id": "p06", "last_commit_version": 60})  # replaced
        assert _versions(control) == (before[0] + 1, before[1])  # nothing written yet
        # The object's reads see them, as written rows read back.
        log = control.read_log()
        assert [row["run_id"] for row in log] == [f"run-{run:03d}" for run in range(1, 7)]
        assert log[-1]["started_at"] == _entry(6, "p06").started_at
        assert {i: s["last_commit_version"] for i, s in control.read_states().items()} == {
            **{i: run for run, i in enumerate(ids, start=2)},
            "p06": 60,
        }
        # Another reader (another process) sees none of them yet.
        assert [row["run_id"] for row in ControlTable(root).read_log()] == ["run-001"]
    assert _versions(control) == (before[0] + 2, before[1] + 1)
    other = ControlTable(root)
    assert {i: s["last_commit_version"] for i, s in other.read_states().items()} == {
        **{i: run for run, i in enumerate(ids[:-1], start=2)},
        "p06": 60,
    }
    assert len(other.read_log()) == 6


def test_held_rows_are_written_at_the_next_write_once_the_oldest_is_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(control_module, "HELD_AT_MOST_S", 0.0)
    control = ControlTable(str(tmp_path / "_control"))
    control.ensure()
    before = _versions(control)
    with control.holding_writes():
        control.append_log(_entry(1, "p01"))
        control.upsert_state({"pipeline_id": "p01", "last_commit_version": 1})
        assert _versions(control) == (before[0] + 1, before[1] + 1)
    assert _versions(control) == (before[0] + 1, before[1] + 1)  # nothing left to write


def test_a_due_write_waits_for_the_state_row_that_follows_a_log_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's step records its load-log row, then its state row: held rows that are due are
    written with both, never between them (a process dying there would leave the load log
    ahead of the state, and the next run would record the run again from silver's log)."""
    monkeypatch.setattr(control_module, "HELD_AT_MOST_S", 0.0)  # every held row is due
    root = str(tmp_path / "_control")
    control = ControlTable(root)
    control.ensure()
    before = _versions(control)
    with control.holding_writes():
        control.append_log(_entry(1, "p01"), state_follows=True)
        assert _versions(control) == before  # waits for the state row
        control.upsert_state({"pipeline_id": "p01", "last_commit_version": 1})
        assert _versions(control) == (before[0] + 1, before[1] + 1)
        other = ControlTable(root)
        assert [row["run_id"] for row in other.read_log()] == ["run-001"]
        assert other.read_states()["p01"]["last_commit_version"] == 1


def test_a_control_write_that_keeps_losing_to_concurrent_commits_is_a_classified_error(
    tmp_path: Path,
) -> None:
    """A write that loses every try (here: to a table read before another writer replaced the
    rows it replaces) fails as CONCURRENT_WRITE, naming the write, and commits nothing."""
    import pyarrow as pa
    from deltalake import write_deltalake

    path = str(tmp_path / "state")
    write_deltalake(path, pa.table({"k": [1, 2]}))
    stale = DeltaTable(path)
    write_deltalake(path, pa.table({"k": [1]}), mode="overwrite", predicate="k = 1")

    with pytest.raises(ConcurrentWriteConflict) as error:
        retry_on_conflict(
            lambda: write_deltalake(
                stale, pa.table({"k": [2]}), mode="overwrite", predicate="k = 2"
            ),
            f"upsert into {path}",
        )

    assert error.value.incident_code == "CONCURRENT_WRITE" and error.value.retryable
    assert f"upsert into {path} lost to a concurrent commit 8 times in a row" in str(error.value)
    assert DeltaTable(path).version() == 1
