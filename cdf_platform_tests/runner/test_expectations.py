"""Expectations (`PipelineSpec.expectations`), one story per action, each run checked against a
plain-Python oracle: the spec applied to bronze's rows, with the quarantine holding exactly the
current rows that fail a `quarantine` rule (and no `drop` rule).

Bronze (id, name, amount); the rules: `positive` (amount > 0), `named` (name IS NOT NULL),
`small` (amount < 1000), `known` (id < 100).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import DataQualityError, InvalidPipelineSpec
from cdf_platform.core.spec.expectations import ExpectationAction
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.storage import ENVIRONMENT_ONLY
from cdf_platform.deltalog.tables import is_delta_table
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.run.verify import verify_pipeline
from cdf_platform.spark.write.key_filter import key_filter
from cdf_platform.state.control import ControlTable
from cdf_platform.state.quarantine import quarantine_path
from cdf_platform.state.verifications import VerificationOutcome
from cdf_platform_tests.bronze import (
    control_for,
    make_bronze,
    records,
    rows,
    spec_for,
    sql,
    vacuum_retain_zero,
)
from cdf_platform_tests.event_log import DEBEZIUM, Event, EventLog

Row = tuple[int, str | None, int]
RULES: dict[str, tuple[str, Callable[[Row], bool]]] = {
    "positive": ("amount > 0", lambda r: r[2] is not None and r[2] > 0),
    "named": ("name IS NOT NULL", lambda r: r[1] is not None),
    "small": ("amount < 1000", lambda r: r[2] is not None and r[2] < 1000),
    "known": ("id < 100", lambda r: r[0] < 100),
}


def _spec(lake: Path, actions: dict[str, str], **fields: Any) -> PipelineSpec:
    expectations = [
        {"name": name, "rule": RULES[name][0], "action": action} for name, action in actions.items()
    ]
    return spec_for(lake, expectations=expectations, fallback_mode="SNAPSHOT_REBUILD", **fields)


def _failed(spec: PipelineSpec, row: Row) -> list[str]:
    return [e.name for e in spec.expectations if not RULES[e.name][1](row)]


def oracle(spec: PipelineSpec, bronze: list[Row]) -> tuple[list[Row], dict[int, list[str]]]:
    """Silver's rows and the quarantine (key -> failed rules) of `spec` applied to `bronze`."""
    actions = {e.name: e.action for e in spec.expectations}
    silver: list[Row] = []
    held: dict[int, list[str]] = {}
    for row in bronze:
        failed = _failed(spec, row)
        acts = {actions[name] for name in failed}
        if ExpectationAction.DROP in acts:
            continue
        if ExpectationAction.QUARANTINE in acts:
            held[row[0]] = failed
            continue
        silver.append(row)
    return sorted(silver), held


def quarantine(spark: SparkSession, spec: PipelineSpec, control: ControlTable) -> dict[int, Any]:
    path = quarantine_path(control.root, spec.id)
    if not is_delta_table(path, ENVIRONMENT_ONLY):
        return {}
    found = records(spark, path)
    assert len(found) == len({r["id"] for r in found}), "a key held twice"
    return {r["id"]: (list(r["failed_rules"]), json.loads(r["row"])) for r in found}


def assert_exact(spark: SparkSession, spec: PipelineSpec, control: ControlTable) -> None:
    """Silver and the quarantine are the oracle of bronze's current rows."""
    bronze = rows(spark, spec.source, "id", "name", "amount")
    expected_silver, expected_held = oracle(spec, bronze)
    assert rows(spark, spec.target, "id", "name", "amount") == expected_silver
    held = quarantine(spark, spec, control)
    assert {k: v[0] for k, v in held.items()} == expected_held
    by_key = {r[0]: r for r in bronze}
    for key, (_, row) in held.items():
        assert (row["id"], row["name"], row["amount"]) == by_key[key]


def _counts(control: ControlTable, spec: PipelineSpec) -> dict[str, Any]:
    return json.loads(control.read_log(spec.id)[-1]["expectations"])


def test_warn_writes_and_counts(spark: SparkSession, lake: Path) -> None:
    spec = _spec(lake, {"small": "warn", "named": "warn"})
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 10), (2, None, 5000), (3, "c", 30)])
    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.mode is RunMode.INITIAL_LOAD
    assert_exact(spark, spec, control)
    assert _counts(control, spec) == {"judged": 3, "failing": {"small": 1, "named": 1}}
    assert result.as_metadata()["expectation_small_failing"] == 1
    sql(spark, spec.source, "UPDATE {t} SET amount = 7000 WHERE id IN (1, 3)")
    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.mode is RunMode.INCREMENTAL
    assert_exact(spark, spec, control)
    # Two update postimages judged (a preimage never is).
    assert _counts(control, spec) == {"judged": 2, "failing": {"small": 2, "named": 0}}
    assert quarantine(spark, spec, control) == {}


def test_drop_removes_a_key_that_turns_bad_and_readmits_it(spark: SparkSession, lake: Path) -> None:
    spec = _spec(lake, {"positive": "drop"}, delete_mode="soft")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 10), (2, "b", -5), (3, "c", 30)])
    runner = PipelineRunner.on(control, lambda: spark)
    runner.run(spec)
    assert_exact_soft(spark, spec, control, deleted={2: None})
    sql(spark, spec.source, "UPDATE {t} SET amount = -1 WHERE id = 1")
    runner.run(spec)
    # Soft: the key that turned bad is marked deleted, as `where` marks it.
    assert_exact_soft(spark, spec, control, deleted={1: -1, 2: None})
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    sql(spark, spec.source, "UPDATE {t} SET amount = 5 WHERE id = 2")
    runner.run(spec)
    assert_exact_soft(spark, spec, control, deleted={})
    assert _counts(control, spec) == {"judged": 2, "failing": {"positive": 0}}


def assert_exact_soft(
    spark: SparkSession, spec: PipelineSpec, control: ControlTable, deleted: dict[int, Any]
) -> None:
    live = rows(spark, spec.target, "id", "name", "amount", "_is_deleted")
    assert [r[:3] for r in live if not r[3]] == oracle(spec, rows(spark, spec.source))[0]
    # A key dropped at the initial load never reached silver; one dropped later is marked.
    assert {r[0] for r in live if r[3]} == {k for k, v in deleted.items() if v is not None}


def test_quarantine_holds_exactly_the_failing_current_rows(spark: SparkSession, lake: Path) -> None:
    spec = _spec(lake, {"positive": "quarantine", "named": "drop", "small": "warn"})
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 10), (2, "b", -5), (3, None, 30), (4, "d", 2000)])
    runner = PipelineRunner.on(control, lambda: spark)
    runner.run(spec)
    assert_exact(spark, spec, control)
    assert set(quarantine(spark, spec, control)) == {2}
    # 1 turns bad (quarantined, leaves silver), 2 turns good (leaves quarantine), 3 is named
    # (re-admitted), 5 fails both a drop and a quarantine rule (dropped, not held), 6 is held.
    sql(spark, spec.source, "UPDATE {t} SET amount = -1 WHERE id = 1")
    sql(spark, spec.source, "UPDATE {t} SET amount = 5 WHERE id = 2")
    sql(spark, spec.source, "UPDATE {t} SET name = 'c' WHERE id = 3")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (5, NULL, -3), (6, 'f', 0)")
    runner.run(spec)
    assert_exact(spark, spec, control)
    assert set(quarantine(spark, spec, control)) == {1, 6}
    # A held key deleted in bronze leaves the quarantine.
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 6")
    runner.run(spec)
    assert_exact(spark, spec, control)
    # Verification applies the same rules: silver without the kept-out rows is equal.
    verified = verify_pipeline(spec, control, lambda: spark)
    assert verified.verification.outcome is VerificationOutcome.EQUAL
    # A rerun of the same state adds nothing (the rebuild replaces the quarantine whole).
    runner.run(spec, force_rebuild=True)
    assert_exact(spark, spec, control)
    assert set(quarantine(spark, spec, control)) == {1}


def test_relaxing_a_quarantine_rule_readmits_its_rows(spark: SparkSession, lake: Path) -> None:
    spec = _spec(lake, {"positive": "quarantine"})
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 10), (2, "b", -5)])
    runner = PipelineRunner.on(control, lambda: spark)
    runner.run(spec)
    assert set(quarantine(spark, spec, control)) == {2}
    relaxed = _spec(lake, {"positive": "warn"})
    result = runner.run(relaxed)
    assert result.mode is RunMode.REBUILD
    assert_exact(spark, relaxed, control)
    assert quarantine(spark, relaxed, control) == {}


def test_fail_refuses_and_writes_nothing(spark: SparkSession, lake: Path) -> None:
    spec = _spec(lake, {"known": "fail", "positive": "quarantine"})
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 10), (2, "b", -5)])
    runner = PipelineRunner.on(control, lambda: spark)
    runner.run(spec)
    assert set(quarantine(spark, spec, control)) == {2}
    versions = _table_versions(spec, control)
    sql(spark, spec.source, "INSERT INTO {t} VALUES (100, 'x', -1), (101, 'y', 1), (3, 'c', -2)")
    with pytest.raises(DataQualityError, match=r"'known'.*2 of 3 row.*100.*fail"):
        runner.run(spec)
    # Silver and the quarantine as they were: no commit to either.
    assert _table_versions(spec, control) == versions
    assert control.read_log(spec.id)[-1]["outcome"] == "FAILED"
    # The bad rows fixed in bronze, the next run goes through.
    sql(spark, spec.source, "DELETE FROM {t} WHERE id >= 100")
    runner.run(spec)
    assert_exact(spark, spec, control)


def _table_versions(spec: PipelineSpec, control: ControlTable) -> list[int]:
    return [DeltaTable(p).version() for p in (spec.target, quarantine_path(control.root, spec.id))]


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        pytest.param("amount + 1", "is int, not a boolean", id="not-boolean"),
        pytest.param("missing_column > 0", "is not a valid condition", id="missing-column"),
        pytest.param("amount >", "is not a valid condition", id="does-not-parse"),
        pytest.param("rand() > 0.5", "non-deterministic", id="non-deterministic"),
    ],
)
def test_a_bad_rule_is_refused_before_anything_is_read(
    spark: SparkSession, lake: Path, rule: str, problem: str
) -> None:
    spec = spec_for(lake, expectations=[{"name": "bad", "rule": rule, "action": "drop"}])
    make_bronze(spark, spec.source, [(1, "a", 10)])
    with pytest.raises(InvalidPipelineSpec, match=problem):
        PipelineRunner.on(control_for(lake), lambda: spark).run(spec)
    assert not is_delta_table(spec.target, ENVIRONMENT_ONLY)


def test_a_lost_windows_rebuild_agrees_with_the_runs_before_it(
    spark: SparkSession, lake: Path
) -> None:
    spec = _spec(lake, {"positive": "quarantine", "named": "drop"})
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 10), (2, "b", -5), (3, None, 30)])
    sql(
        spark,
        spec.source,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = "
        "'interval 1 seconds', 'delta.enableDeletionVectors' = 'false')",
    )
    runner = PipelineRunner.on(control, lambda: spark)
    runner.run(spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = -1 WHERE id = 1")
    sql(spark, spec.source, "UPDATE {t} SET amount = 5 WHERE id = 2")
    sql(spark, spec.source, "INSERT INTO {t} VALUES (4, 'd', -4)")
    time.sleep(1.5)
    vacuum_retain_zero(spark, spec.source)
    result = runner.run(spec)
    assert result.mode is RunMode.REBUILD
    assert_exact(spark, spec, control)
    assert set(quarantine(spark, spec, control)) == {1, 4}
    assert json.loads(control.read_log(spec.id)[-1]["expectations"]) == {
        "judged": 4,
        "failing": {"positive": 2, "named": 1},
    }


def test_an_event_logs_quarantine_follows_the_sequence(spark: SparkSession, lake: Path) -> None:
    spec = _spec(
        lake,
        {"positive": "quarantine"},
        changes="events",
        events=DEBEZIUM,
        sequence_by="ts_ms",
    )
    control = control_for(lake)
    log = EventLog(spark, spec.source)
    log.append(Event("c", 1, 10, "a", 10), Event("c", 2, 11, "b", 20), Event("c", 3, 12, "c", -3))
    runner = PipelineRunner.on(control, lambda: spark)
    runner.run(spec)
    _check_events(spark, spec, control, log)
    # 1 turns bad at 40; 2 turns bad at 41; 3 turns good at 42.
    log.append(Event("u", 1, 40, "a", -1), Event("u", 2, 41, "b", -2), Event("u", 3, 42, "c", 3))
    runner.run(spec)
    _check_events(spark, spec, control, log)
    # Late events, older than what silver and the quarantine hold: they change nothing.
    log.append(Event("u", 1, 30, "a", 7), Event("u", 3, 31, "c", -9), Event("c", 4, 5, "d", -4))
    runner.run(spec)
    _check_events(spark, spec, control, log)
    assert set(quarantine(spark, spec, control)) == {1, 2, 4}
    runner.run(spec, force_rebuild=True)
    _check_events(spark, spec, control, log)


def _check_events(
    spark: SparkSession, spec: PipelineSpec, control: ControlTable, log: EventLog
) -> None:
    latest = [e for e in log.latest().values() if e.op != "d"]
    good = sorted((e.id, e.name, e.amount) for e in latest if (e.amount or 0) > 0)
    held = {e.id: ["positive"] for e in latest if not (e.amount or 0) > 0}
    assert rows(spark, spec.target, "id", "name", "amount") == good
    assert {k: v[0] for k, v in quarantine(spark, spec, control).items()} == held


def test_a_snapshot_sources_dumps_are_judged_whole(spark: SparkSession, lake: Path) -> None:
    spec = _spec(lake, {"positive": "quarantine", "named": "drop"}, changes="snapshots")
    control = control_for(lake)
    runner = PipelineRunner.on(control, lambda: spark)

    def dump(data: list[Row]) -> None:
        frame = spark.createDataFrame(data, "id BIGINT, name STRING, amount INT")
        frame.write.format("delta").mode("overwrite").save(spec.source)

    dump([(1, "a", 10), (2, "b", -5), (3, None, 30)])
    assert runner.run(spec).mode is RunMode.INITIAL_LOAD
    assert_exact(spark, spec, control)
    dump([(1, "a", -1), (2, "b", 5), (3, "c", 30), (4, None, -4)])
    assert runner.run(spec).mode is RunMode.SNAPSHOT
    assert_exact(spark, spec, control)
    assert set(quarantine(spark, spec, control)) == {1}


def test_the_quarantines_sequence_guard_reads_only_the_silver_files_its_keys_reach(
    spark: SparkSession, lake: Path
) -> None:
    """A late event that silver outdates leaves the quarantine as it is; the guard reads silver
    through the run's key filter (the SCD1 MERGE's), so silver's files of other keys are skipped."""
    spec = _spec(
        lake, {"positive": "quarantine"}, changes="events", events=DEBEZIUM, sequence_by="ts_ms"
    )
    control = control_for(lake)
    runner = PipelineRunner.on(control, lambda: spark)
    log = EventLog(spark, spec.source)
    log.append(*(Event("c", i, 100, f"n{i}", i) for i in range(1, 11)))
    runner.run(spec)
    log.append(*(Event("c", i, 100, f"n{i}", i) for i in range(100, 111)))
    runner.run(spec)
    # Key 105's event is older than silver's row: it changes nothing, and its failing image is
    # not held. Key 107's newer event fails: it is held.
    log.append(Event("u", 105, 50, "late", -5), Event("u", 107, 200, "bad", -7))
    changed = spark.createDataFrame([(105,), (107,)], "id BIGINT")
    assert key_filter(spark, spec.target, changed, ["id"]) is not None  # files skipped
    runner.run(spec)
    assert set(quarantine(spark, spec, control)) == {107}
    silver = dict(rows(spark, spec.target, "id", "amount"))
    assert (silver[105], 107 in silver) == (105, False)
