"""Consumer-aware VACUUM: raise the retention or refuse while a consumer still needs history."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import sql_path
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.planning.vacuum import RetentionPolicy, VacuumAction, plan_vacuum
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.table.vacuum_execution import execute_vacuum
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import control_for, insert, make_bronze, rows, spec_for, sql


def _lagging_consumer(spark: SparkSession, lake: Path) -> tuple[PipelineSpec, ControlTable]:
    """A consumer at version 1 while bronze moved on by updates and a delete (tombstones and
    `_change_data` files a replay needs), on a table keeping 1 hour of deleted files."""
    spec = spec_for(lake)
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    sql(
        spark,
        spec.source,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = "
        "'interval 1 hours')",
    )
    PipelineRunner.on(control, lambda: spark).run(spec)
    sql(spark, spec.source, "UPDATE {t} SET amount = amount + 1")
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")
    insert(spark, spec.source, [(4, "dee", 40)])
    return spec, control


def _property(spark: SparkSession, path: str, key: str) -> str | None:
    properties = spark.sql(f"DESCRIBE DETAIL {sql_path(path)}").collect()[0]["properties"]
    return properties.get(key)


def test_raise_policy_extends_retention_then_vacuums_without_cutting_the_window(
    spark: SparkSession, lake: Path
) -> None:
    spec, control = _lagging_consumer(spark, lake)
    decision = plan_vacuum(
        spec.source, [spec], policy=RetentionPolicy.RAISE, buffer_hours=6, control=control
    )
    assert decision.action is VacuumAction.RAISE_RETENTION_AND_VACUUM
    assert decision.deleted_file_retention_hours == 1
    assert 6 <= decision.required_retention_hours < 6.5
    assert decision.new_deleted_file_retention_hours == 7
    assert [(c.consumer, c.kind) for c in decision.consumers] == [("people", "pipeline")]
    assert decision.consumers[0].first_needed_version == 3  # 0 create, 1 insert, 2 alter
    assert decision.recommended_retention_hours == pytest.approx(
        decision.max_expected_downtime_hours + decision.recovery_buffer_hours
    )

    outcome = execute_vacuum(spark, decision)
    assert outcome.vacuumed
    assert _property(spark, spec.source, "delta.deletedFileRetentionDuration") == "interval 7 hours"
    # The default logRetentionDuration (30 days) already exceeds 7 h + the 24 h margin.
    assert decision.new_log_retention_hours is None
    status = pipeline_status(spec, control)
    assert status.replayable
    # Replayable, with ~7 h of headroom: below the spec's 24 h minimum, so it warns.
    assert status.state is WindowState.LOW_HEADROOM
    assert status.headroom_hours is not None and 6.5 < status.headroom_hours <= 7
    result = PipelineRunner.on(control, lambda: spark).run(spec)
    assert result.mode is RunMode.INCREMENTAL
    assert rows(spark, spec.target) == rows(spark, spec.source)


# Retention that cannot cover a consumer: (policy, cap in hours, what the refusal says).
CANNOT_COVER = [
    (RetentionPolicy.REFUSE, 720.0, "the policy is to refuse"),
    (RetentionPolicy.RAISE, 2.0, "above the cap of 2 h"),
]


def test_refused_while_a_consumer_is_behind_until_retain_zero_overrides_and_cuts_the_window(
    spark: SparkSession, lake: Path
) -> None:
    spec, control = _lagging_consumer(spark, lake)
    # Retention that cannot cover the consumer is refused, and the refusal writes nothing.
    before = sorted(p.name for p in Path(spec.source).rglob("*.parquet"))
    for policy, cap, reason in CANNOT_COVER:
        decision = plan_vacuum(
            spec.source, [spec], policy=policy, buffer_hours=6, max_retention_hours=cap
        )
        assert decision.action is VacuumAction.REFUSE, policy
        assert reason in decision.reason
        outcome = execute_vacuum(spark, decision)
        assert not outcome.vacuumed, policy
        assert sorted(p.name for p in Path(spec.source).rglob("*.parquet")) == before, policy
        retention = _property(spark, spec.source, "delta.deletedFileRetentionDuration")
        assert retention == "interval 1 hours", policy

    # So is RETAIN 0 HOURS, unless the loss of the consumer's window is allowed.
    refused = plan_vacuum(spec.source, [spec], retain_zero=True)
    assert refused.action is VacuumAction.REFUSE
    assert "['people']" in refused.reason

    forced = plan_vacuum(spec.source, [spec], retain_zero=True, allow_window_loss=True)
    assert forced.action is VacuumAction.VACUUM_RETAIN_ZERO
    outcome = execute_vacuum(spark, forced)
    assert outcome.vacuumed
    assert outcome.files_deleted is None or outcome.files_deleted > 0
    status = pipeline_status(spec, control)
    assert status.state is WindowState.LOST
    assert status.problem_code == "WATERMARK_OUTSIDE_RETENTION"


def test_vacuums_when_every_consumer_is_caught_up(spark: SparkSession, lake: Path) -> None:
    spec, control = _lagging_consumer(spark, lake)
    PipelineRunner.on(control, lambda: spark).run(spec)
    decision = plan_vacuum(spec.source, [spec], buffer_hours=0.5, control=control)
    assert decision.action is VacuumAction.VACUUM
    assert decision.consumers[0].first_needed_version is None
    assert execute_vacuum(spark, decision).vacuumed
    status = pipeline_status(spec, control)
    # VACUUM START/END are two new versions without data: a lag in versions, not in data.
    assert (status.version_lag, status.data_version_lag) == (2, 0)
    assert status.replayable
    # Those two versions change no row: the next run advances the watermark without Spark.
    assert PipelineRunner.on(control, lambda: spark).run(spec).mode is RunMode.ADVANCE
    assert pipeline_status(spec, control).state is WindowState.OK
