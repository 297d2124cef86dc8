"""Generated bronze histories against the oracle: after every consumer run silver equals the
oracle (computed in Python from bronze's history and the pipeline's options), the watermark is
the pinned version, and every lost window was detected and recovered (no silent loss). The CI
histories hold every feasible pair of option levels (`cdf_platform_testkit.faults.options`).
Some of them also feed a gold consumer on the watermark IO manager, materialized with Dagster
and checked against the gold oracle (`cdf_platform_testkit.faults.gold`). Some edit the pipeline's
spec between runs (`where`, `columns`, `keys`: `cdf_platform_testkit.faults.spec_edits`); after
the next run silver is the oracle of the edited spec."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_testkit.faults.gold import GoldConsumer
from cdf_platform_testkit.faults.harness import Divergence, HistoryHarness, history_spec
from cdf_platform_testkit.faults.history import CI_PROFILE, RUNS, SPEC_EDITS, Op, plan_history
from cdf_platform_testkit.faults.options import COVERING, HistoryConfig, config_for, coverage_table
from cdf_platform_testkit.faults.oracle import read_silver

pytestmark = pytest.mark.long(minutes=5)

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


def test_ci_seeds_edit_the_spec_in_every_shape() -> None:
    """Spec edits are drawn with a modest probability, from a generator of their own: some CI
    history edits each of `where`, `columns` and `keys`, among them the keys of an SCD1 silver
    (rewritten in the new shape) and of an SCD2 one (refused), and an edit under FAIL_FAST (the
    operator's rebuild); inserting the edits changed none of the histories' other steps."""
    edits: dict[Op, set[tuple[str, str]]] = {op: set() for op in SPEC_EDITS}
    for seed in CI_SEEDS:
        config = config_for(seed)
        plan = plan_history(seed, CI_PROFILE)
        for op in plan:
            if op in SPEC_EDITS:
                edits[op].add((config.history, config.fallback))
        without = plan_history(seed, replace(CI_PROFILE, spec_edit=0.0))
        assert [op for op in plan if op not in SPEC_EDITS] == without, seed
        assert len([op for op in plan if op in SPEC_EDITS]) <= 2, seed
    assert all(edits.values()), edits
    assert {"scd1", "scd2"} <= {history for history, _ in edits[Op.EDIT_KEYS]}
    assert "FAIL_FAST" in {fallback for kinds in edits.values() for _, fallback in kinds}


# SCD1 with soft deletes, `where` and derived columns, NULLs ignored: every kind of edit between
# runs, each followed by a run. History 32's edits (its own generator): the filter removed and a
# derived expression changed; keys [id] -> [id, tenant]; an incremental run under the composite
# key; a derived column added; keys back to [id] with a derived column removed.
EDITED_SEED = 32
EDITED_HISTORY = [
    Op.INSERT,
    Op.RUN,
    Op.UPDATE,
    Op.DELETE,
    Op.EDIT_WHERE,
    Op.EDIT_COLUMNS,
    Op.RUN,
    Op.MERGE,
    Op.EDIT_KEYS,
    Op.NULL_UPDATE,
    Op.INSERT,
    Op.RUN,
    Op.UPDATE,
    Op.DELETE,
    Op.RUN,
    Op.EDIT_COLUMNS,
    Op.MERGE,
    Op.RUN,
    Op.EDIT_KEYS,
    Op.EDIT_COLUMNS,
    Op.RUN,
]
EDITS_DRAWN = [
    "where 'coalesce(amount, 1) % 5 != 0' -> None",
    "columns: big = 'amount >= 250' (was 'amount >= 500')",
    "keys ['id'] -> ['id', 'tenant']",
    "columns: amount_x2 = 'amount * 2' (was None)",
    "keys ['id', 'tenant'] -> ['id']",
    "columns: big removed",
]


def test_spec_edits_between_runs_leave_silver_the_new_spec_applied_to_bronze(
    spark: SparkSession, lake: Path
) -> None:
    """Each run after an edit of `where`, `columns` or `keys` rebuilds (SPEC_CHANGED) and
    leaves silver equal to the oracle of the edited spec over bronze's snapshot: rows the old
    filter dropped back, derived values recomputed, an added column filled, a keys edit
    rewriting silver in the new shape (tombstones gone, a removed column with them); the run
    between edits is incremental under the composite key."""
    config = HistoryConfig(deletes="soft", conform="on", ignore_nulls="on")
    harness = HistoryHarness(spark, lake, seed=EDITED_SEED, config=config)
    report = harness.run(list(EDITED_HISTORY))
    assert report.divergences == []
    assert [op for op in report.operations if op.startswith("edit_")] == [
        op.value for op in EDITED_HISTORY if op in SPEC_EDITS
    ]
    assert report.spec_edits == EDITS_DRAWN
    assert report.incidents == Counter({"SPEC_CHANGED": 4})
    assert report.modes == Counter({"initial_load": 1, "rebuild": 4, "incremental": 1})
    assert (harness.spec.keys, harness.spec.where, harness.spec.columns) == (
        ["id"],
        None,
        {"id_band": "id % 4", "amount_x2": "amount * 2"},
    )
    assert (report.spurious_rebuilds, report.actual_losses) == (0, 0)


def test_a_row_the_where_filter_keeps_out_closes_its_scd2_version_at_its_first_filtered_change(
    spark: SparkSession, lake: Path
) -> None:
    """Sequenced SCD2: an update `where` drops is a delete at its sequence value, and further
    updates of the row while it stays out find the key absent: the version closes at the first
    (found by a `where` edit in history 5, where NULL amounts stay out across updates)."""
    config = HistoryConfig(history="scd2", sequence_by="on", conform="on")
    harness = HistoryHarness(spark, lake, seed=5, config=config)
    bronze = harness.start([{"id": 1, "name": "ada", "amount": 11, "seq": 1000}])
    harness.consumer_run(Op.RUN)
    bronze.update([1], amount_delta=4, name="bob", seq={1: 2000})  # 15: filtered
    bronze.update([1], amount_delta=5, name="cy", seq={1: 3000})  # 20: still filtered
    harness.consumer_run(Op.RUN)  # raises Divergence when silver differs from the oracle
    assert [(r["__start_at"], r["__end_at"]) for r in harness.history] == [(1000, 2000)]


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
    monkeypatch.setattr("cdf_platform.planning.lost_window.window_problem", lambda *args: None)
    monkeypatch.setattr("cdf_platform.run.context.assert_safe_spark_config", lambda s: None)
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
    monkeypatch.setattr("cdf_platform_testkit.faults.gold_asset._live", lambda frame: F.lit(True))
    bronze.delete([2])

    with pytest.raises(Divergence, match=r"name 'ada': gold .* \(3, 6\), oracle \(2, 4\)"):
        harness.consumer_run(Op.RUN)
    assert gold.report.modes == Counter({"full": 1, "incremental": 1})
