"""Silver follows its spec (docs/design.md section 3a): a pipeline loaded once, its spec edited,
one unrelated bronze UPDATE, one run. Per class of edit, silver then equals the new spec applied
to bronze's snapshot, or the run refused with its class and wrote nothing; `status` shows the
edit before the run and OK after; the load log keeps the spec each run wrote under.

Bronze (id, region, status, amount) holds four rows, one of them `status = 'TEST'`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import SpecChanged, SpecChangeRefused
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import spec_fingerprint, spec_record, transform_code
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.status import SpecState, WindowState, pipeline_status
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import control_for, live_rows, sql

ROWS = "(1, 'eu', 'OK', 10), (2, 'us', 'OK', 20), (3, 'eu', 'TEST', 30), (4, 'us', 'OK', 40)"


def _bronze(spark: SparkSession, lake: Path) -> str:
    path = str(lake / "bronze")
    sql(
        spark,
        path,
        "CREATE TABLE {t} (id BIGINT, region STRING, status STRING, amount INT) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
    )
    sql(spark, path, f"INSERT INTO {{t}} VALUES {ROWS}")
    return path


def _spec(lake: Path, **fields: Any) -> PipelineSpec:
    values: dict[str, Any] = {
        "id": "orders",
        "source": str(lake / "bronze"),
        "target": str(lake / "silver"),
        "keys": ["id"],
        "fallback_mode": "SNAPSHOT_REBUILD",
    }
    return PipelineSpec(**{**values, **fields})


def _silver(spark: SparkSession, spec: PipelineSpec, *columns: str) -> list[tuple[Any, ...]]:
    return live_rows(spark, spec.target, *columns)


def _edit_and_run(
    spark: SparkSession,
    lake: Path,
    before: dict[str, Any],
    after: dict[str, Any],
    control: ControlTable,
) -> tuple[PipelineSpec, Any]:
    """Load with `before`, edit to `after`, commit the unrelated UPDATE, check `status` shows
    the edit, run once; return the edited spec and the run's result."""
    first = _spec(lake, **before)
    PipelineRunner.on(control, lambda: spark).run(first)
    assert pipeline_status(first, control).spec_state is SpecState.OK
    sql(spark, first.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    edited = _spec(lake, **after)
    shown = pipeline_status(edited, control)
    assert shown.state is WindowState.SPEC_CHANGED, shown
    assert shown.spec_state is SpecState.CHANGED
    result = PipelineRunner.on(control, lambda: spark).run(edited)
    after_run = pipeline_status(edited, control)
    assert (after_run.state, after_run.spec_state) == (WindowState.OK, SpecState.OK)
    assert after_run.spec_fingerprint == spec_fingerprint(edited)
    return edited, result


@pytest.mark.parametrize(
    ("before", "after", "columns", "expected", "touched"),
    [
        pytest.param(
            {},
            {"where": "status != 'TEST'"},
            ("id", "amount"),
            [(1, 11), (2, 20), (4, 40)],
            {1, 3},
            id="where-added",
        ),
        pytest.param(
            {"columns": {"amount_x": "amount * 2"}},
            {"columns": {"amount_x": "amount * 3"}},
            ("id", "amount_x"),
            [(1, 33), (2, 60), (3, 90), (4, 120)],
            {1, 2, 3, 4},
            id="column-expression",
        ),
        pytest.param(
            {},
            {"exclude_columns": ["region"]},
            ("id", "region", "amount"),
            [(1, None, 11), (2, None, 20), (3, None, 30), (4, None, 40)],
            {1, 2, 3, 4},
            id="column-excluded",
        ),
        pytest.param(
            {"delete_mode": "soft", "where": "status != 'TEST'"},
            {"delete_mode": "soft"},
            ("id", "status"),
            [(1, "OK"), (2, "OK"), (3, "TEST"), (4, "OK")],
            {1, 3},
            id="where-removed-soft",
        ),
    ],
)
def test_an_edit_that_alters_rows_is_reconciled_quietly_from_a_pinned_snapshot(
    spark: SparkSession,
    lake: Path,
    before: dict[str, Any],
    after: dict[str, Any],
    columns: tuple[str, ...],
    expected: list[tuple[Any, ...]],
    touched: set[int],
) -> None:
    _bronze(spark, lake)
    control = control_for(lake)
    edited, result = _edit_and_run(spark, lake, before, after, control)
    assert (result.mode, result.incident_code) == (RunMode.REBUILD, "SPEC_CHANGED")
    assert _silver(spark, edited, *columns) == expected
    # Quiet: silver's change feed holds the rows that really changed (the unrelated UPDATE's
    # and those the edit changed), never a rewrite of the others.
    latest = DeltaTable(edited.target).version()
    reader = spark.read.format("delta").option("readChangeFeed", "true")
    feed = reader.option("startingVersion", latest).load(edited.target)
    assert {r["id"] for r in feed.select("id").collect()} == touched
    entry = control.read_log("orders")[-1]
    assert entry["spec_fingerprint"] == spec_fingerprint(edited)
    assert json.loads(entry["spec"])["keys"] == ["id"]
    assert "reconciled silver from the bronze snapshot" in entry["message"]


def test_a_key_change_rewrites_silver_on_the_new_keys_never_a_merge_on_other_keys(
    spark: SparkSession, lake: Path
) -> None:
    _bronze(spark, lake)
    control = control_for(lake)
    edited, result = _edit_and_run(spark, lake, {}, {"keys": ["id", "region"]}, control)
    assert (result.mode, result.incident_code) == (RunMode.REBUILD, "SPEC_CHANGED")
    assert _silver(spark, edited, "id", "region", "amount") == [
        (1, "eu", 11),
        (2, "us", 20),
        (3, "eu", 30),
        (4, "us", 40),
    ]
    assert "rewrote silver in the new shape" in control.read_log("orders")[-1]["message"]
    # The next incremental run merges on the new keys.
    sql(spark, edited.source, "UPDATE {t} SET region = 'ap' WHERE id = 2")
    assert PipelineRunner.on(control, lambda: spark).run(edited).mode is (RunMode.INCREMENTAL)
    assert _silver(spark, edited, "id", "region") == [(1, "eu"), (2, "ap"), (3, "eu"), (4, "us")]


def test_a_delete_mode_change_rewrites_silver_with_the_new_columns(
    spark: SparkSession, lake: Path
) -> None:
    _bronze(spark, lake)
    control = control_for(lake)
    edited, _ = _edit_and_run(spark, lake, {}, {"delete_mode": "soft"}, control)
    assert _silver(spark, edited, "id", "_is_deleted") == [(i, False) for i in (1, 2, 3, 4)]
    sql(spark, edited.source, "DELETE FROM {t} WHERE id = 3")
    PipelineRunner.on(control, lambda: spark).run(edited)
    frame = spark.read.format("delta").load(edited.target)
    assert frame.filter("_is_deleted").select("id").collect()[0][0] == 3


def test_an_scd2_key_change_is_refused_and_nothing_is_written(
    spark: SparkSession, lake: Path
) -> None:
    _bronze(spark, lake)
    control = control_for(lake)
    first = _spec(lake, history="scd2")
    PipelineRunner.on(control, lambda: spark).run(first)
    edited = _spec(lake, history="scd2", keys=["id", "region"])
    shown = pipeline_status(edited, control)
    assert (shown.state, shown.spec_state) == (WindowState.BLOCKED, SpecState.REFUSED)
    assert shown.spec_changed_fields == ("keys",)
    version = DeltaTable(first.target).version()
    with pytest.raises(SpecChangeRefused, match="move the silver table"):
        PipelineRunner.on(control, lambda: spark).run(edited)
    with pytest.raises(SpecChangeRefused):
        PipelineRunner.on(control, lambda: spark).run(edited, force_rebuild=True)
    assert DeltaTable(first.target).version() == version


def test_fail_fast_refuses_the_edit_until_the_rebuild_it_names(
    spark: SparkSession, lake: Path
) -> None:
    _bronze(spark, lake)
    control = control_for(lake)
    first = _spec(lake, fallback_mode="FAIL_FAST")
    PipelineRunner.on(control, lambda: spark).run(first)
    edited = _spec(lake, fallback_mode="FAIL_FAST", where="status != 'TEST'")
    with pytest.raises(SpecChanged, match="cdf-platform rebuild orders") as refused:
        PipelineRunner.on(control, lambda: spark).run(edited)
    assert refused.value.problem.startswith("the pipeline's where changed")
    assert _silver(spark, edited, "id") == [(1,), (2,), (3,), (4,)]
    assert control.read_log("orders")[-1]["incident_code"] == "SPEC_CHANGED"
    # What to do works: the rebuild the message names.
    PipelineRunner.on(control, lambda: spark).run(edited, force_rebuild=True)
    assert _silver(spark, edited, "id") == [(1,), (2,), (4,)]
    assert pipeline_status(edited, control).spec_state is SpecState.OK


def test_forward_only_applies_the_edit_to_new_changes_and_stays_visible_until_a_rebuild(
    spark: SparkSession, lake: Path
) -> None:
    _bronze(spark, lake)
    control = control_for(lake)
    first = _spec(lake, columns={"amount_x": "amount * 2"})
    PipelineRunner.on(control, lambda: spark).run(first)
    edited = _spec(lake, columns={"amount_x": "amount * 3"}, on_spec_change="forward_only")
    pending = pipeline_status(edited, control)
    assert (pending.state, pending.spec_state) == (WindowState.OK, SpecState.FORWARD_ONLY)
    sql(spark, first.source, "UPDATE {t} SET amount = 11 WHERE id = 1")
    result = PipelineRunner.on(control, lambda: spark).run(edited)
    assert (result.mode, result.incident_code) == (RunMode.INCREMENTAL, None)
    assert _silver(spark, edited, "id", "amount_x") == [(1, 33), (2, 40), (3, 60), (4, 80)]
    shown = pipeline_status(edited, control)
    assert (shown.state, shown.spec_state, shown.spec_changed_fields) == (
        WindowState.OK,
        SpecState.FORWARD_ONLY,
        ("columns",),
    )
    entry = control.read_log("orders")[-1]
    assert entry["incident_code"] == "SPEC_FORWARD_ONLY"
    assert "up to bronze version 1" in entry["message"]
    # Still visible on later runs, then cleared by a rebuild that reconciles the old rows.
    sql(spark, first.source, "UPDATE {t} SET amount = 21 WHERE id = 2")
    PipelineRunner.on(control, lambda: spark).run(edited)
    assert pipeline_status(edited, control).spec_state is SpecState.FORWARD_ONLY
    PipelineRunner.on(control, lambda: spark).run(edited, force_rebuild=True)
    assert _silver(spark, edited, "id", "amount_x") == [(1, 33), (2, 63), (3, 90), (4, 120)]
    assert pipeline_status(edited, control).spec_state is SpecState.OK
    # A key change is never taken forward only.
    rekeyed = _spec(
        lake,
        columns={"amount_x": "amount * 3"},
        on_spec_change="forward_only",
        keys=["id", "region"],
    )
    with pytest.raises(SpecChangeRefused, match="forward_only"):
        PipelineRunner.on(control, lambda: spark).run(rekeyed)


def test_fields_that_shape_no_row_are_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    limits = spec.model_copy(
        update={
            "max_allowed_lag_hours": 3.0,
            "min_headroom_hours": 1.0,
            "fallback_mode": "FAIL_FAST",
            "on_spec_change": "forward_only",
            "bronze_table": "other",
            "target": str(tmp_path / "elsewhere"),
        }
    )
    assert spec_fingerprint(limits) == spec_fingerprint(spec)
    assert spec_fingerprint(spec.model_copy(update={"keys": ["id", "region"]})) != (
        spec_fingerprint(spec)
    )
    reordered = _spec(tmp_path, columns={"a": "1", "b": "a + 1"})
    assert spec_fingerprint(reordered) != spec_fingerprint(
        _spec(tmp_path, columns={"b": "a + 1", "a": "1"})
    )


def _double(frame: Any) -> Any:
    return frame.withColumn("amount", frame["amount"] * 2)


def _triple(frame: Any) -> Any:
    return frame.withColumn("amount", frame["amount"] * 3)


def test_a_transforms_code_is_part_of_the_record_not_only_its_name() -> None:
    assert transform_code(_double) != transform_code(_triple)
    spec = PipelineSpec(id="t", source="b", target="s", keys=["id"], transform="json:dumps")
    assert (
        spec_record(spec)["transform"]
        != spec_record(spec.model_copy(update={"transform": "json:loads"}))["transform"]
    )
