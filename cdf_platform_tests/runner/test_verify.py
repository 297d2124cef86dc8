"""Verification: silver compared with its spec applied to a pinned bronze version (equal after
normal runs, nothing committed; a foreign UPDATE, DELETE and INSERT named by key; the repair
changes exactly those keys; a silver behind bronze compared at its watermark), for SCD1, soft
deletes, SCD2 and an event log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdf_platform.core.errors import VerificationRefused
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import spec_fingerprint
from cdf_platform.run import PipelineRunner
from cdf_platform.run.verify import VERIFY_MODE, verify_pipeline
from cdf_platform.state.verifications import (
    VerificationOutcome,
    last_verified_silver_version,
    read_verifications,
)
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.bronze import (
    commit_feed,
    control_for,
    insert,
    make_bronze,
    rows,
    spec_for,
    sql,
)
from cdf_platform_tests.event_log import DEBEZIUM, Event, EventLog

# A spec that shapes rows: a filter and a derived column, so the oracle below is the spec.
SHAPED = {"where": "amount < 900", "columns": {"double": "amount * 2"}}


def oracle(bronze: str) -> list[tuple[Any, ...]]:
    """The spec `SHAPED` applied to bronze's current rows, in plain Python (read with
    deltalake, no Spark): (id, name, amount, double) of the rows with amount < 900."""
    table = DeltaTable(bronze).to_pyarrow_table().to_pylist()
    return sorted(
        (r["id"], r["name"], r["amount"], r["amount"] * 2)
        for r in table
        if r["amount"] is not None and r["amount"] < 900
    )


def silver_rows(spark: SparkSession, spec: PipelineSpec) -> list[tuple[Any, ...]]:
    return rows(spark, spec.target, "id", "name", "amount", "double")


def silver_version(spec: PipelineSpec) -> int:
    return DeltaTable(spec.target).version()


def ran(spark: SparkSession, lake: Path, spec: PipelineSpec) -> None:
    PipelineRunner.on(control_for(lake), lambda: spark).run(spec)


def shaped_pipeline(spark: SparkSession, lake: Path, **fields: Any) -> PipelineSpec:
    """Bronze with 30 rows, updates, deletes and a row the filter drops, each run into silver."""
    spec = spec_for(lake, **SHAPED, **fields)
    make_bronze(spark, spec.source, [(i, f"n{i}", i * 10) for i in range(1, 31)])
    ran(spark, lake, spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = amount + 1 WHERE id % 3 = 0")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id IN (4, 5)")
    sql(spark, spec.source, "UPDATE {t} SET amount = 950 WHERE id = 7")  # filtered out
    ran(spark, lake, spec)
    return spec


def _by_spark(spark: SparkSession, target: str) -> None:
    sql(spark, target, "UPDATE {t} SET name = 'hand fix' WHERE id = 10")
    sql(spark, target, "DELETE FROM {t} WHERE id = 20")
    sql(spark, target, "INSERT INTO {t} (id, name, amount, double) VALUES (99, 'x', 1, 2)")


def _by_deltalake(_spark: SparkSession, target: str) -> None:
    table = DeltaTable(target)
    table.update(predicate="id = 10", updates={"name": "'hand fix'"})
    table.delete("id = 20")
    row = DeltaTable(target).to_pyarrow_table(filters=[("id", "=", 1)])
    for name, value in (("id", 99), ("amount", 1), ("double", 2)):
        kind = row.schema.field(name).type
        row = row.set_column(row.schema.get_field_index(name), name, pa.array([value], kind))
    row = row.set_column(row.schema.get_field_index("name"), "name", pa.array(["x"]))
    write_deltalake(target, row, mode="append")


@pytest.mark.parametrize("writer", [_by_spark, _by_deltalake], ids=["spark_sql", "deltalake"])
def test_foreign_writes_are_named_by_key_and_the_repair_changes_only_those_keys(
    spark: SparkSession, lake: Path, writer: Any
) -> None:
    # deltalake writes no table with deletion vectors; Spark SQL writes them.
    spec = shaped_pipeline(spark, lake, deletion_vectors=writer is _by_spark)
    control = control_for(lake)
    watermark = read_silver_state(spec.target, spec.id).watermark
    before = silver_version(spec)

    # After normal runs silver is equal: nothing is written, even asked to repair.
    unchanged = verify_pipeline(spec, control, lambda: spark, repair=True)
    assert unchanged.verification.outcome is VerificationOutcome.EQUAL
    assert unchanged.comparison.differing_buckets == 0
    assert unchanged.comparison.expected_rows == len(oracle(spec.source)) == 27
    assert silver_version(spec) == unchanged.verification.silver_version == before
    assert last_verified_silver_version(control, spec.id) == before

    # Three writes the platform did not make: an UPDATE, a DELETE and an INSERT.
    writer(spark, spec.target)
    foreign = silver_version(spec)

    found = verify_pipeline(spec, control, lambda: spark)

    assert found.verification.outcome is VerificationOutcome.DIFFERENT
    assert found.verification.differing_keys == 3
    assert [(k["id"], k["difference"]) for k in found.comparison.sample] == [
        (10, "changed"),
        (20, "missing"),
        (99, "unexpected"),
    ]
    assert silver_version(spec) == foreign  # a verification alone writes nothing
    assert last_verified_silver_version(control, spec.id) == before  # not settled

    repaired = verify_pipeline(spec, control, lambda: spark, repair=True)

    assert repaired.verification.outcome is VerificationOutcome.REPAIRED
    assert repaired.verification.repaired_silver_version == foreign + 1
    assert silver_rows(spark, spec) == oracle(spec.source)
    # Only the three keys reach silver's change feed, in one stamped commit at the watermark.
    assert {row[0] for row in commit_feed(spark, spec.target, foreign + 1)} == {10, 20, 99}
    state = read_silver_state(spec.target, spec.id)
    assert state.watermark == watermark and state.silver_version == foreign + 1
    assert state.last_run is not None and state.last_run["mode"] == VERIFY_MODE
    assert last_verified_silver_version(control, spec.id) == foreign + 1
    # The repair is a run of the pipeline: its load-log row and state row, like every run's.
    (logged,) = [row for row in control.read_log(spec.id) if row["mode"] == VERIFY_MODE]
    assert (logged["run_id"], logged["outcome"]) == (repaired.verification.run_id, "SUCCESS")
    assert (logged["watermark_before"], logged["watermark_after"]) == (watermark, watermark)
    assert logged["rows_inserted"] + logged["rows_updated"] + logged["rows_deleted"] == 3
    assert control.read_states()[spec.id]["last_mode"] == VERIFY_MODE
    outcomes = [v.outcome for v in read_verifications(control, spec.id)]
    assert outcomes == [
        VerificationOutcome.EQUAL,
        VerificationOutcome.DIFFERENT,
        VerificationOutcome.REPAIRED,
    ]
    if writer is _by_deltalake:
        return  # what follows is the same whoever wrote to silver

    # The next run goes on from the same watermark; the next verification finds silver equal.
    insert(spark, spec.source, [(40, "n40", 400)])
    ran(spark, lake, spec)
    again = verify_pipeline(spec, control, lambda: spark)
    assert again.verification.outcome is VerificationOutcome.EQUAL
    assert silver_rows(spark, spec) == oracle(spec.source)

    # Bronze moves on without a run: silver is compared at its watermark, and equal; asked
    # at bronze's latest version, the change silver has not taken yet is named.
    at = read_silver_state(spec.target, spec.id).watermark
    sql(spark, spec.source, "UPDATE {t} SET name = 'later' WHERE id = 1")
    behind = verify_pipeline(spec, control, lambda: spark)
    assert behind.verification.outcome is VerificationOutcome.EQUAL
    assert behind.verification.bronze_version == at
    assert behind.note is not None and "behind bronze" in behind.note
    latest = DeltaTable(spec.source).version()
    asked = verify_pipeline(spec, control, lambda: spark, bronze_version=latest)
    assert [(k["id"], k["difference"]) for k in asked.comparison.sample] == [(1, "changed")]
    assert asked.note is not None and "past silver's watermark" in asked.note


@pytest.mark.parametrize(
    "fields",
    [{"delete_mode": "soft"}, {"history": "scd2"}, {"ignore_null_updates": True}],
    ids=["soft-delete", "scd2", "ignore-null-updates"],
)
def test_other_layouts_verify_equal_after_normal_runs_and_name_a_foreign_update(
    spark: SparkSession, lake: Path, fields: dict[str, Any]
) -> None:
    spec = shaped_pipeline(spark, lake, **fields)
    sql(spark, spec.source, "UPDATE {t} SET name = NULL WHERE id = 8")
    ran(spark, lake, spec)
    control = control_for(lake)
    before = silver_version(spec)

    assert verify_pipeline(spec, control, lambda: spark).verification.outcome.value == "EQUAL"
    assert silver_version(spec) == before

    sql(spark, spec.target, "UPDATE {t} SET amount = -1 WHERE id = 11")
    found = verify_pipeline(spec, control, lambda: spark)
    assert [(k["id"], k["difference"]) for k in found.comparison.sample] == [(11, "changed")]


def test_an_event_log_verifies_equal_and_its_foreign_writes_are_named_and_repaired(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(
        lake, changes="events", events=DEBEZIUM, sequence_by="ts_ms", fallback_mode="FAIL_FAST"
    )
    log = EventLog(spark, spec.source)
    log.append(*(Event("c", i, 100 + i, f"n{i}", i) for i in range(1, 11)))
    ran(spark, lake, spec)
    log.append(Event("u", 2, 200, "two", 22), Event("d", 3, 201), Event("u", 2, 202, "2", 2))
    ran(spark, lake, spec)
    log.check(spark, spec)
    control = control_for(lake)

    assert verify_pipeline(spec, control, lambda: spark).verification.outcome.value == "EQUAL"

    # A key deleted and a value changed by hand: both are named, and the repair folds the
    # events again, writing the missing key back and the changed key's event again, and only
    # those two keys.
    sql(spark, spec.target, "DELETE FROM {t} WHERE id = 2")
    sql(spark, spec.target, "UPDATE {t} SET amount = -1 WHERE id = 5")
    repaired = verify_pipeline(spec, control, lambda: spark, repair=True)
    assert [(k["id"], k["difference"]) for k in repaired.comparison.sample] == [
        (2, "missing"),
        (5, "changed"),
    ]
    assert repaired.verification.outcome is VerificationOutcome.REPAIRED
    assert {row[0] for row in commit_feed(spark, spec.target, silver_version(spec))} == {2, 5}
    log.check(spark, spec)


def test_nothing_to_verify_before_the_first_run_is_refused(spark: SparkSession, lake: Path) -> None:
    spec = spec_for(lake)
    make_bronze(spark, spec.source, [(1, "a", 1)])
    with pytest.raises(VerificationRefused, match="no watermark yet"):
        verify_pipeline(spec, control_for(lake), lambda: spark)


def test_the_verify_fields_shape_no_row_and_leave_the_fingerprint() -> None:
    spec = PipelineSpec(id="orders", source="b", target="s", keys=["id"])
    opted_out = spec.model_copy(update={"verify": False, "verify_repair": "auto"})
    assert spec_fingerprint(opted_out) == spec_fingerprint(spec)


def test_an_scd2_event_log_verifies_its_open_versions_equal(
    spark: SparkSession, lake: Path
) -> None:
    spec = spec_for(
        lake,
        changes="events",
        events=DEBEZIUM,
        sequence_by="ts_ms",
        history="scd2",
        fallback_mode="FAIL_FAST",
    )
    log = EventLog(spark, spec.source)
    log.append(*(Event("c", i, 100 + i, f"n{i}", i) for i in range(1, 6)))
    ran(spark, lake, spec)
    # A late event older than the key's current one, a delete, and an update.
    log.append(Event("u", 1, 50, "old", 0), Event("d", 3, 200), Event("u", 4, 210, "four", 4))
    ran(spark, lake, spec)
    log.check(spark, spec)
    control = control_for(lake)

    assert verify_pipeline(spec, control, lambda: spark).verification.outcome.value == "EQUAL"

    sql(spark, spec.target, "UPDATE {t} SET name = 'x' WHERE id = 4 AND __end_at IS NULL")
    found = verify_pipeline(spec, control, lambda: spark)
    assert [(k["id"], k["difference"]) for k in found.comparison.sample] == [(4, "changed")]
