"""Generated bronze histories against the oracle: after every consumer run silver equals the
oracle (computed in Python from bronze's history and the pipeline's options), the watermark is
the pinned version, and every lost window was detected and recovered (no silent loss). The CI
histories hold every feasible pair of option levels (`cdf_platform_tests.faults.options`).
Some of them also feed a gold consumer on the watermark IO manager, materialized with Dagster
and checked against the gold oracle (`cdf_platform_tests.faults.gold`)."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.orchestration.resources import SparkResource
from cdf_platform_tests.faults.gold import GoldConsumer
from cdf_platform_tests.faults.harness import Divergence, HistoryHarness, history_spec
from cdf_platform_tests.faults.history import CI_PROFILE, RUNS, Op, plan_history
from cdf_platform_tests.faults.options import COVERING, HistoryConfig, config_for, coverage_table
from cdf_platform_tests.faults.oracle import read_silver

CI_SEEDS = list(range(1, len(COVERING) + 1))
# The CI histories that also feed the gold consumer, one per silver shape: SCD2 ordered by
# `sequence_by` with lost windows and a FAIL_FAST operator's rebuild (1), SCD1 with hard
# deletes and key updates (2), SCD1 with soft deletes, lost windows and a recreated bronze (7),
# SCD2 with key updates and lost windows (9). Gold costs seconds per history: not all ten; and
# its VACUUM of silver (then a full recompute) only in two of them, seed -> VACUUMs at most.
GOLD_SEEDS = {1: 0, 2: 1, 7: 1, 9: 0}


def test_ci_histories_hold_every_feasible_pair_of_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The coverage table of the CI histories' configs (printed): every feasible pair of levels
    of two factors is held by at least one history, and each factor that adds an operation
    kind has it planned in the histories where it is on."""
    configs = [config_for(seed) for seed in CI_SEEDS]
    table, missing = coverage_table(configs)
    with capsys.disabled():
        print(f"\nOption pairs held by the {len(configs)} CI histories:\n{table}")
    assert missing == []
    for seed, config in zip(CI_SEEDS, configs, strict=True):
        plan = set(plan_history(seed, CI_PROFILE))
        assert config.on("key_updates") == (Op.KEY_UPDATE in plan), seed
        assert config.on("sequence_by") == (Op.LATE_UPDATE in plan), seed
        losing = {Op.VACUUM, Op.AGED_VACUUM, Op.CDF_GAP, Op.RECREATE, Op.RUN_SQUEEZED}
        assert config.on("lost_window") == bool(plan & losing), seed
        schema = {"none": set(), "add": {Op.ADD_COLUMN}, "drop": {Op.ADD_COLUMN, Op.DROP_COLUMN}}
        schema["rename"] = {Op.ADD_COLUMN, Op.RENAME_COLUMN}
        changes = plan & {Op.ADD_COLUMN, Op.DROP_COLUMN, Op.RENAME_COLUMN}
        assert changes == schema[config.schema], seed


def test_ci_seeds_cover_every_operation_kind() -> None:
    """The CI histories, taken together, hold every kind of step at least once."""
    planned = Counter(op for seed in CI_SEEDS for op in plan_history(seed, CI_PROFILE))
    assert set(Op) - set(planned) == set()
    for seed in CI_SEEDS:
        plan = plan_history(seed, CI_PROFILE)
        assert len(plan) >= 25
        assert plan[-1] in RUNS


def test_ci_seeds_retire_a_column_then_reinsert_a_soft_deleted_key() -> None:
    """Some soft-delete CI history loads an added column, deletes a row holding a value in it,
    drops (another: renames) the column, rebuilds (FAIL_FAST: the operator's rebuild), then
    re-inserts the deleted key: neither the deleted row nor the re-inserted one may keep the
    retired column's value."""
    wanted: list[Op | tuple[Op, ...]] = [
        Op.ADD_COLUMN,
        RUNS,
        Op.DELETE,
        Op.DROP_COLUMN,
        RUNS,
        Op.REINSERT,
        RUNS,
    ]

    def holds_sequence(plan: list[Op]) -> bool:
        step = 0
        for op in plan:
            want = wanted[step]
            if op is want or (isinstance(want, tuple) and op in want):
                step += 1
                if step == len(wanted):
                    return True
        return False

    soft = [s for s in CI_SEEDS if history_spec(Path("lake"), s).delete_mode == "soft"]
    for retiring in (Op.DROP_COLUMN, Op.RENAME_COLUMN):
        wanted[3] = retiring
        assert any(holds_sequence(plan_history(seed, CI_PROFILE)) for seed in soft), retiring


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_generated_history_matches_the_oracle_without_silent_loss(
    spark: SparkSession,
    spark_resource: SparkResource,
    lake: Path,
    seed: int,
    record_property: Callable[[str, object], None],
) -> None:
    gold = None
    if seed in GOLD_SEEDS:
        spec = history_spec(lake, seed)
        gold = GoldConsumer(spark_resource, lake, spec, seed, vacuums=GOLD_SEEDS[seed])
    report = HistoryHarness(spark, lake, seed, CI_PROFILE, gold=gold).run()
    assert report.divergences == []
    assert report.silent_losses == 0
    assert report.spurious_rebuilds == 0
    assert report.detected_losses == report.actual_losses
    assert len(report.operations) >= 25
    record_property("seconds", round(report.seconds, 2))
    if report.gold is not None:
        record_property("gold", report.gold)  # its runs, modes and seconds (--junitxml)
        assert report.gold["runs"] >= 3  # the first read, the catch-up at the end, the rerun


class _SessionsIgnoringMissingFiles:
    """Hands the engine sessions with `spark.sql.files.ignoreMissingFiles=true`."""

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark

    def newSession(self) -> SparkSession:  # noqa: N802 (the SparkSession method name)
        session = self._spark.newSession()
        session.conf.set("spark.sql.files.ignoreMissingFiles", "true")
        return session


def test_the_oracle_catches_a_silent_loss_when_the_engine_guards_are_disabled(
    spark: SparkSession, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness has teeth: with the plan's window check and the ignoreMissingFiles guard
    disabled, a vacuumed range is read "successfully" with rows missing, and the harness
    reports a silent loss and a divergence."""
    harness = HistoryHarness(spark, lake, seed=2, config=HistoryConfig())
    bronze = harness.start([{"id": k, "name": f"n{k}", "amount": k} for k in range(1, 6)])
    harness.consumer_run(Op.RUN)
    bronze.update([1, 2], amount_delta=100, name="changed")
    bronze.delete([3])
    bronze.vacuum_now(full=True)
    monkeypatch.setattr("cdf_platform.planning.assessment.window_problem", lambda *args: None)
    monkeypatch.setattr("cdf_platform.runner.assert_safe_spark_config", lambda s: None)
    unsafe: Any = _SessionsIgnoringMissingFiles(spark)
    harness.spark = unsafe

    with pytest.raises(Divergence, match="mode incremental, expected rebuild"):
        harness.consumer_run(Op.RUN)
    assert (harness.report.actual_losses, harness.report.silent_losses) == (1, 1)
    silver = read_silver(harness.spec.target)
    assert 3 in silver.rows  # the delete was lost...
    assert silver.rows[1].values["amount"] == 1  # ...and so was the update


def test_the_gold_oracle_catches_a_consumer_that_counts_soft_deleted_rows(
    spark: SparkSession, spark_resource: SparkResource, lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gold check has teeth: once the consumer forgets that a soft-deleted row is gone (it
    counts every row as live), the incremental batch of the run that deletes a row leaves the
    name's totals unchanged, and the harness reports the divergence."""
    config = HistoryConfig(deletes="soft")
    gold = GoldConsumer(spark_resource, lake, history_spec(lake, 2, config), 2, skip=0, vacuums=0)
    harness = HistoryHarness(spark, lake, seed=2, config=config, gold=gold)
    bronze = harness.start([{"id": k, "name": "ada", "amount": k} for k in range(1, 4)])
    harness.consumer_run(Op.RUN)
    assert gold.report.modes == Counter({"full": 1})
    monkeypatch.setattr("cdf_platform_tests.faults.gold_asset._live", lambda frame: F.lit(True))
    bronze.delete([2])

    with pytest.raises(Divergence, match=r"name 'ada': gold .* \(3, 6\), oracle \(2, 4\)"):
        harness.consumer_run(Op.RUN)
    assert gold.report.modes == Counter({"full": 1, "incremental": 1})


@pytest.mark.slow
def test_many_generated_histories(spark: SparkSession, tmp_path: Path) -> None:
    """`pytest -m slow`: CDF_FUZZ_SEEDS histories (default 50) with the fuzz profile."""
    from bench.fuzz import run_seeds

    count = int(os.environ.get("CDF_FUZZ_SEEDS", "50"))
    summary = run_seeds(spark, tmp_path, range(1000, 1000 + count))
    assert summary["divergences"] == 0
    assert summary["silent_losses"] == 0
    assert summary["harness_errors"] == 0
