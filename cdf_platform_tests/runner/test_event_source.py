"""A change-event log (`changes: events`): Debezium-shaped events (`op`, `before`/`after`,
`ts_ms`) landed in an append-only bronze table are folded into silver, checked after every run
against an independent fold of every event ever written: several events of one key in one
commit, an event arriving late, a late event for a deleted key, a retention DELETE of old bronze
events, and a VACUUM that loses the window, repaired by folding the events bronze still holds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.cli import main
from cdf_platform.core.errors import DataQualityError, InvalidPipelineSpec
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.run_result import RunResult
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import control_for, rows, spec_for, sql, vacuum_retain_zero
from cdf_platform_tests.event_log import DEBEZIUM, Event, EventLog
from cdf_platform_tests.lake_platform import control_for as lake_control_for
from cdf_platform_tests.lake_platform import (
    incremental_tick,
    materialization,
    materialize,
    run_as_daemon,
    table_rows,
    vacuum_breaking_the_window,
)

pytestmark = pytest.mark.long(minutes=4)


def events_spec(lake: Path, **overrides: Any) -> PipelineSpec:
    fields: dict[str, Any] = {
        "changes": "events",
        "events": DEBEZIUM,
        "sequence_by": "ts_ms",
        "fallback_mode": "SNAPSHOT_REBUILD",
    }
    return spec_for(lake, **{**fields, **overrides})


def checked_runs(
    spark: SparkSession, lake: Path, spec: PipelineSpec, log: EventLog
) -> Callable[[], RunResult]:
    """A run of `spec` that asserts silver is the fold of `log`'s events afterwards."""
    control = control_for(lake)

    def run_and_check() -> RunResult:
        result = PipelineRunner.on(control, lambda: spark).run(spec)
        log.check(spark, spec)
        return result

    return run_and_check


@pytest.mark.parametrize(
    ("history", "delete_mode"), [("scd1", "hard"), ("scd1", "soft"), ("scd2", "hard")]
)
def test_a_debezium_log_folds_into_silver_run_by_run(
    spark: SparkSession, lake: Path, history: str, delete_mode: str
) -> None:
    spec = events_spec(lake, history=history, delete_mode=delete_mode)
    log = EventLog(spark, spec.source)
    run_and_check = checked_runs(spark, lake, spec, log)

    log.append(  # 1
        Event("r", 1, 100, "ada", 10),
        Event("r", 2, 100, "bob", 20),
        Event("r", 3, 100, "cy", 30),
        Event("r", 6, 100, "fay", 60),
    )
    assert run_and_check().mode is RunMode.INITIAL_LOAD

    # Several events of one key in one commit, out of order inside it; a delete; an insert.
    log.append(  # 2
        Event("u", 1, 210, "ada", 12),
        Event("u", 1, 200, "ada", 11),
        Event("d", 2, 220, "bob", 20),
        Event("c", 4, 230, "dee", 40),
    )
    second = run_and_check()
    assert second.mode is RunMode.INCREMENTAL

    # Late: an update older than silver's row, and one older than key 2's delete.
    log.append(  # 3
        Event("u", 1, 150, "ada", 999),
        Event("u", 2, 215, "bob", 21),
        Event("u", 3, 300, "cy", 33),
    )
    run_and_check()

    # Bronze's retention: its old events deleted, the table compacted. Silver does not move.
    before = rows(spark, spec.target)
    sql(spark, spec.source, "DELETE FROM {t} WHERE ts_ms < 200")  # 4
    sql(spark, spec.source, "OPTIMIZE {t}")  # 5
    assert run_and_check().mode is RunMode.INCREMENTAL
    assert rows(spark, spec.target) == before

    # New events; then retention and VACUUM remove the files the next run needs: the window
    # is lost, and the rebuild folds the events bronze still holds.
    log.append(Event("c", 5, 400, "eve", 50), Event("d", 3, 410, "cy", 33))  # 6
    sql(spark, spec.source, "OPTIMIZE {t}")  # 7: rewrites version 6's file
    vacuum_retain_zero(spark, spec.source)
    repaired = run_and_check()
    assert repaired.mode is RunMode.REBUILD
    assert repaired.incident_code in ("WATERMARK_OUTSIDE_RETENTION", "WINDOW_FILES_MISSING")
    # Key 6's only event was removed by retention: the fold keeps its row and says so.
    assert "1 silver key(s) have no event left in bronze" in (repaired.incident_message or "")
    assert "(id=6)" in (repaired.incident_message or "")
    # Every event bronze holds is folded, each dated by its sequence: an SCD2 history is whole,
    # and no note says changes are missing from it.
    assert "not in the history" not in (repaired.incident_message or "")

    # After the repair, incremental runs go on.
    log.append(Event("u", 6, 500, "fay", 66), Event("u", 5, 390, "eve", 0))  # 8
    assert run_and_check().mode is RunMode.INCREMENTAL


def test_a_late_event_after_the_tombstone_retention_brings_the_key_back(
    spark: SparkSession, lake: Path
) -> None:
    """Tombstones are kept `tombstone_retention_hours` only: the documented price of bounding
    them."""
    spec = events_spec(lake, events={**DEBEZIUM, "tombstone_retention_hours": 0.0001})
    control = control_for(lake)
    log = EventLog(spark, spec.source)

    def run() -> None:
        PipelineRunner.on(control, lambda: spark).run(spec)

    log.append(Event("c", 1, 100, "ada", 10))
    run()
    log.append(Event("d", 1, 300, "ada", 10))
    run()
    log.append(Event("u", 1, 200, "ada", 11))  # older than the delete, after the retention
    run()
    assert rows(spark, spec.target, "id", "amount") == [(1, 11)]


def _refusal(spark: SparkSession, lake: Path, *events: Event, **overrides: Any) -> str:
    spec = events_spec(lake, fallback_mode="FAIL_FAST", **overrides)
    control: ControlTable = control_for(lake)
    log = EventLog(spark, spec.source)
    log.append(Event("c", 1, 100, "ada", 10))
    PipelineRunner.on(control, lambda: spark).run(spec)
    log.append(*events)
    with pytest.raises((DataQualityError, InvalidPipelineSpec)) as raised:
        PipelineRunner.on(control, lambda: spark).run(spec)
    assert rows(spark, spec.target, "id", "amount") == [(1, 10)]  # nothing half-written
    assert control.read_log(spec.id)[-1]["outcome"] == "FAILED"
    return str(raised.value)


def test_two_different_events_of_a_key_with_one_sequence_value_are_refused(
    spark: SparkSession, lake: Path
) -> None:
    message = _refusal(spark, lake, Event("u", 1, 200, "ada", 11), Event("u", 1, 200, "ada", 12))
    assert "bronze commit 2 holds 2 different events of key (id=1)" in message
    assert "same sequence_by value (ts_ms=200)" in message


def test_the_same_event_delivered_twice_in_one_commit_is_one_event(
    spark: SparkSession, lake: Path
) -> None:
    spec = events_spec(lake)
    control = control_for(lake)
    log = EventLog(spark, spec.source)
    log.append(Event("c", 1, 100, "ada", 10), Event("c", 1, 100, "ada", 10))
    PipelineRunner.on(control, lambda: spark).run(spec)
    assert rows(spark, spec.target, "id", "amount", "ts_ms") == [(1, 10, 100)]


def test_an_unknown_operation_value_is_refused(spark: SparkSession, lake: Path) -> None:
    message = _refusal(spark, lake, Event("x", 1, 200, "ada", 11))
    assert "operation x is in no list of `events` (upserts, deletes, truncates)" in message
    assert "(id=1)" in message


def test_an_events_row_that_is_not_a_struct_is_refused(spark: SparkSession, lake: Path) -> None:
    spec = events_spec(lake, fallback_mode="FAIL_FAST", events={**DEBEZIUM, "row": "op"})
    EventLog(spark, spec.source).append(Event("c", 1, 100, "ada", 10))
    with pytest.raises(InvalidPipelineSpec, match=r"events.row \('op'\) gives a string, not a"):
        PipelineRunner.on(control_for(lake), lambda: spark).run(spec)
    assert not (lake / "silver").exists()


def test_an_event_log_without_sequence_by_is_refused() -> None:
    with pytest.raises(ValueError, match="`changes: events` needs `sequence_by`"):
        PipelineSpec(
            id="people", source="b", target="s", keys=["id"], changes="events", events=DEBEZIUM
        )


def test_an_event_log_runs_through_dagster_and_the_sensor_repairs_its_lost_window(
    spark: SparkSession, spark_resource: SparkResource, tmp_path: Path
) -> None:
    """The silver asset of an event log: loaded, then kept in step by the incremental sensor's
    runs; its checks pass as for any pipeline; when VACUUM loses the window the check reports it
    and the sensor's next run repairs it by folding the events bronze still holds."""
    lake = tmp_path / "lake"
    lake.mkdir()
    pipeline = {
        "id": "accounts",
        "source": "bronze/accounts_cdc",
        "target": "silver/accounts",
        "keys": ["id"],
        "changes": "events",
        "sequence_by": "ts_ms",
        "events": DEBEZIUM,
    }
    defs = build_defs(lake_control_for(lake, pipeline), spark_resource, automation=False)
    instance = dg.DagsterInstance.ephemeral()
    silver = silver_key("accounts")
    target = str(lake / "silver" / "accounts")
    log = EventLog(spark, str(lake / "bronze" / "accounts_cdc"))
    log.append(Event("c", 1, 100, "ada", 10), Event("c", 2, 100, "bob", 20))
    first = materialization(materialize(defs, silver, instance=instance), silver)
    assert (first["mode"], first["watermark_after"]) == ("initial_load", 1)

    def sensor_run() -> dict[str, Any]:
        (request,) = incremental_tick(defs, instance).run_requests
        found = materialization(run_as_daemon(defs, instance, request), silver)
        assert table_rows(spark, target, "id", "name", "amount", "ts_ms") == log.scd1()
        return found

    log.append(Event("u", 1, 200, "ada", 11), Event("u", 1, 190, "ada", 9), Event("d", 2, 210))
    assert sensor_run()["mode"] == "incremental"

    checks = defs.resolve_job_def("checks_job")
    healthy = {
        e.check_name: e
        for e in checks.execute_in_process(instance=instance).get_asset_check_evaluations()
        if e.asset_key == silver
    }
    assert healthy["replay_window"].passed and healthy["consumer_lag"].passed

    log.append(Event("c", 3, 300, "cy", 30))
    sql(spark, log.path, "OPTIMIZE {t}")
    vacuum_breaking_the_window(spark, log.path)
    broken = checks.execute_in_process(instance=instance, raise_on_error=False)
    (window,) = [
        e
        for e in broken.get_asset_check_evaluations()
        if e.asset_key == silver and e.check_name == "replay_window"
    ]
    assert not window.passed and window.metadata["state"].value == "LOST"
    repaired = sensor_run()
    assert repaired["mode"] == "rebuild"


def test_an_event_log_runs_from_the_command_line(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cdf-platform run` and `status` on an event-log pipeline (the CLI's entry point, in this
    process: its SparkSession is the test's)."""
    lake = tmp_path / "lake"
    pipelines = tmp_path / "pipelines.yaml"
    pipelines.write_text(
        "pipelines:\n"
        "  - id: accounts\n"
        "    source: bronze/accounts_cdc\n"
        "    target: silver/accounts\n"
        "    keys: [id]\n"
        "    changes: events\n"
        "    sequence_by: ts_ms\n"
        "    events: {operation: op, upserts: [c, u, r], deletes: [d],"
        " row: 'coalesce(after, before)'}\n"
    )
    log = EventLog(spark, str(lake / "bronze" / "accounts_cdc"))
    common = ["--pipelines", str(pipelines), "--lake-root", str(lake), "--json"]

    def cli(*args: str) -> Any:
        capsys.readouterr()
        assert main([*args, *common]) == 0
        return json.loads(capsys.readouterr().out)

    log.append(Event("c", 1, 100, "ada", 10), Event("u", 1, 110, "ada", 11), Event("c", 2, 100))
    assert cli("run", "accounts")["mode"] == "initial_load"
    log.append(Event("d", 2, 120), Event("u", 1, 105, "ada", 0))
    second = cli("run", "accounts")
    assert (second["mode"], second["rows_deleted"]) == ("incremental", 1)
    assert rows(spark, str(lake / "silver" / "accounts"), "id", "amount", "ts_ms") == [(1, 11, 110)]
    (status,) = cli("status")
    assert (status["state"], status["version_lag"]) == ("OK", 0)


@pytest.mark.parametrize("delete_mode", ["hard", "soft"])
def test_a_truncate_event_empties_silver_up_to_its_sequence_value(
    spark: SparkSession, lake: Path, delete_mode: str
) -> None:
    """`events.truncates`: a truncate removes every row not newer than it, in the same commit
    as the run's other changes; events before it in its own commit, and late ones arriving
    after it, change nothing."""
    spec = events_spec(lake, delete_mode=delete_mode, events={**DEBEZIUM, "truncates": ["t"]})
    log = EventLog(spark, spec.source)
    run_and_check = checked_runs(spark, lake, spec, log)

    log.append(Event("c", 1, 100, "ada", 10), Event("c", 2, 100, "bob", 20))
    log.append(Event("c", 3, 150, "cy", 30))
    run_and_check()
    log.append(
        Event("u", 1, 200, "ada", 11),
        Event("t", 0, 250),
        Event("c", 4, 260, "dee", 40),
        Event("u", 2, 240, "bob", 21),
    )
    truncated = run_and_check()
    assert truncated.mode is RunMode.INCREMENTAL
    assert rows(spark, spec.target, "id", "amount") == (
        [(4, 40)] if delete_mode == "hard" else [(1, 10), (2, 20), (3, 30), (4, 40)]
    )
    log.append(Event("u", 3, 120, "cy", 0), Event("c", 5, 230), Event("u", 1, 300, "ada", 12))
    run_and_check()


def test_event_images_take_columns_where_and_ignore_null_updates(
    spark: SparkSession, lake: Path
) -> None:
    """The row image goes through the spec's modeling like any bronze row: derived `columns`,
    `where` (an event it drops deletes the key; it sees the event's own values, NULLs
    included) and `ignore_null_updates` (a NULL in an upsert keeps the value before it, until
    the key is deleted)."""
    spec = events_spec(
        lake,
        columns={"doubled": "amount * 2"},
        where="amount >= 0",
        ignore_null_updates=True,
    )
    control = control_for(lake)
    log = EventLog(spark, spec.source)

    def run() -> list[tuple[Any, ...]]:
        PipelineRunner.on(control, lambda: spark).run(spec)
        return rows(spark, spec.target, "id", "name", "amount", "doubled", "ts_ms")

    log.append(Event("c", 1, 100, "ada", 10), Event("c", 2, 100, "bob", 20))
    assert run() == [(1, "ada", 10, 20, 100), (2, "bob", 20, 40, 100)]
    log.append(Event("u", 1, 110, None, 12), Event("u", 2, 110, None, 21))
    assert run() == [(1, "ada", 12, 24, 110), (2, "bob", 21, 42, 110)]
    log.append(Event("u", 1, 120, "ada", -1))  # `where` drops it: a delete of key 1
    assert run() == [(2, "bob", 21, 42, 110)]
    log.append(Event("u", 1, 130, None, 5))  # after the delete, its NULL stands
    assert run() == [(1, None, 5, 10, 130), (2, "bob", 21, 42, 110)]
