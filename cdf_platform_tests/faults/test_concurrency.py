"""Concurrency: two runs of one pipeline at once end serialized or with one clean classified
failure and a correct table; bronze commits made while consumer runs are in progress are never
lost. Runs share the test SparkSession (each run takes its own `newSession()`)."""

from __future__ import annotations

import random
import shutil
import threading
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from cdf_platform.core.errors import (
    CdfPlatformError,
    ConcurrentWriteConflict,
    TargetOwnershipConflict,
)
from cdf_platform.core.spec.modes import DeleteMode
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.run_result import RunResult
from cdf_platform.run import PipelineRunner
from cdf_platform.spark.table.silver_layout import SilverLayout
from cdf_platform.spark.table.silver_table import CREATE_RACE_WAIT_S, ensure_silver
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_testkit.faults.bronze_model import BronzeTable
from cdf_platform_testkit.faults.harness import HistoryHarness
from cdf_platform_testkit.faults.history import CI_PROFILE, CONCURRENT_OPS, Op, apply_bronze_op
from cdf_platform_testkit.faults.options import hand_config

ROWS = [{"id": k, "name": f"n{k}", "amount": k} for k in range(1, 7)]


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _changes(bronze: BronzeTable) -> None:
    bronze.update([1], amount_delta=3, name="u")
    bronze.delete([2])
    bronze.merge([{"id": 3, "name": "m", "amount": 30}, {"id": 9, "name": "n", "amount": 9}], [4])


def _setup_initial_load(harness: HistoryHarness, bronze: BronzeTable) -> None:
    """Nothing loaded yet: both runs are initial loads (both create silver)."""


def _setup_incremental(harness: HistoryHarness, bronze: BronzeTable) -> None:
    harness.consumer_run(Op.RUN)
    _changes(bronze)


def _setup_rebuild(harness: HistoryHarness, bronze: BronzeTable) -> None:
    harness.consumer_run(Op.RUN)
    _changes(bronze)
    bronze.vacuum_now(full=True)  # the window is lost: both runs rebuild


SETUPS: dict[RunMode, Callable[[HistoryHarness, BronzeTable], None]] = {
    RunMode.INITIAL_LOAD: _setup_initial_load,
    RunMode.INCREMENTAL: _setup_incremental,
    RunMode.REBUILD: _setup_rebuild,
}


def _race(
    count: int, action: Callable[[], RunResult]
) -> tuple[list[RunResult], list[CdfPlatformError], list[BaseException]]:
    """Start `count` threads on `action` at once; sort outcomes into results, classified
    failures and anything else."""
    barrier = threading.Barrier(count)
    results: list[RunResult] = []
    classified: list[CdfPlatformError] = []
    others: list[BaseException] = []

    def worker() -> None:
        barrier.wait()
        try:
            results.append(action())
        except CdfPlatformError as err:
            classified.append(err)
        except BaseException as err:
            others.append(err)

    threads = [threading.Thread(target=worker) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    return results, classified, others


def _describe(err: BaseException) -> str:
    """An unexpected failure with its message and where it was raised (Py4J errors have an
    empty repr)."""
    where = "".join(traceback.format_tb(err.__traceback__)[-6:])
    return f"{type(err).__name__}: {str(err)[:1500]}\n{where}"


@pytest.mark.parametrize("mode", list(SETUPS), ids=[m.value for m in SETUPS])
def test_two_runs_of_one_pipeline_at_once_end_serialized_or_with_one_classified_failure(
    spark: SparkSession, lake: Path, mode: RunMode
) -> None:
    seed = 5 if mode is RunMode.REBUILD else 4
    harness = HistoryHarness(spark, lake, seed, config=hand_config(seed))
    bronze = harness.start(ROWS)
    SETUPS[mode](harness, bronze)
    latest = bronze.version
    plan_at = _now()

    results, classified, others = _race(
        2, lambda: PipelineRunner.on(harness.control, lambda: spark).run(harness.spec)
    )

    outcome = (
        f"results {[(r.mode.value, r.watermark_after) for r in results]}, "
        f"classified {classified!r}, others {[_describe(e) for e in others]}"
    )
    # The table first: whatever the outcome, silver is the oracle's at the pinned version. A run
    # that planned after the other one finished is a no-op: serialized, and as correct.
    applied = [r for r in results if r.mode is mode]
    assert len(applied) >= 1, outcome
    assert all(r.mode in (mode, RunMode.NOOP) for r in results), outcome
    assert all(r.watermark_after == latest for r in results), outcome
    assert read_silver_state(harness.spec.target, harness.spec.id).watermark == latest, outcome
    harness.verify_silver(mode, applied[0].incident_code, latest, plan_at)
    harness.consumer_run(Op.RUN)  # a later run is a no-op and the control table is right
    assert harness.report.modes["noop"] == 1
    # Then the outcome: serialized, or one clean classified failure.
    assert others == [], outcome
    assert len(classified) <= 1, outcome
    assert all(isinstance(err, ConcurrentWriteConflict) for err in classified), outcome
    assert all("What to do" in str(err) for err in classified), outcome


def test_a_stale_run_finishing_after_a_newer_one_never_moves_the_watermark_back(
    spark: SparkSession, lake: Path
) -> None:
    """Run A pins L1; a commit lands; run B applies up to L2; then A executes its stale plan:
    Delta skips A's MERGE (its txnVersion is below silver's), silver keeps L2."""
    harness = HistoryHarness(spark, lake, seed=6, config=hand_config(6))
    bronze = harness.start(ROWS)
    harness.consumer_run(Op.RUN)
    _changes(bronze)
    runner = PipelineRunner.on(harness.control, lambda: spark)
    stale = runner.prepare(harness.spec)
    bronze.update([3, 5], amount_delta=7, name="late")
    bronze.delete([6])
    newer_at = _now()
    newer = PipelineRunner.on(harness.control, lambda: spark).run(harness.spec)
    newest = bronze.version
    assert newer.watermark_after == newest

    result = runner.finish(stale)
    assert read_silver_state(harness.spec.target, harness.spec.id).watermark == newest
    harness.verify_silver(RunMode.INCREMENTAL, None, newest, newer_at)
    control = harness.control.read_states()[harness.spec.id]["last_commit_version"]
    assert (result.watermark_after, control) == (newest, newest)
    assert (result.rows_inserted, result.rows_updated, result.rows_deleted) == (0, 0, 0)


def test_bronze_commits_made_during_consumer_runs_are_never_lost(
    spark: SparkSession, lake: Path
) -> None:
    """A writer commits to bronze every ~0.3 s while two consumer runs plan and execute; each
    run equals the oracle at its pinned version, and a final run catches up exactly."""
    harness = HistoryHarness(spark, lake, seed=10, config=hand_config(10))
    bronze = harness.start(ROWS)
    harness.consumer_run(Op.RUN)
    stop = threading.Event()
    commits: list[str] = []
    rng = random.Random(10)

    def writer() -> None:
        while not stop.is_set():
            op = rng.choice(CONCURRENT_OPS)
            commits.append(apply_bronze_op(op, bronze, rng, CI_PROFILE).value)
            time.sleep(0.3)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(2):
            # Each run has commits to apply (the writer's first ones could land after two
            # no-op runs otherwise), and more land while it runs.
            seen = len(commits)
            deadline = time.monotonic() + 30
            while len(commits) == seen and time.monotonic() < deadline:
                time.sleep(0.05)
            plan_at = _now()
            runner = PipelineRunner.on(harness.control, lambda: spark)
            prepared = runner.prepare(harness.spec)
            plan = prepared.plan
            result = runner.finish(prepared)
            assert result.watermark_after == plan.end_version
            harness.verify_silver(result.mode, result.incident_code, plan.end_version, plan_at)
            pinned = len(commits)
        # Commits past the last run's pinned version too (a run merged without Spark takes
        # hundredths of a second: the writer may not have committed again while it ran).
        deadline = time.monotonic() + 30
        while len(commits) == pinned and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    assert len(commits) >= 3
    harness.consumer_run(Op.RUN)
    assert harness.watermark == bronze.version
    assert harness.report.silent_losses == harness.report.actual_losses == 0


SILVER_INPUT = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("amount", LongType()),
    ]
)


def _layout() -> SilverLayout:
    return SilverLayout(["id"], ["id", "name", "amount"], DeleteMode.HARD)


def test_a_create_that_finds_another_runs_log_folder_waits_for_its_first_commit(
    spark: SparkSession, lake: Path
) -> None:
    """The race the initial-load case above can hit: the winner's `_delta_log` exists but its
    first commit is still a temp file, so Delta refuses the loser's CREATE (non-empty location).
    The loser waits for the commit and goes on with the winner's table."""
    winner, silver = lake / "winner", lake / "silver"
    ensure_silver(spark, str(winner), "people", SILVER_INPUT, _layout())
    first_commit = "00000000000000000000.json"
    in_flight = silver / "_delta_log" / f".{first_commit}.0c4f.tmp"
    in_flight.parent.mkdir(parents=True)
    shutil.copy(winner / "_delta_log" / first_commit, in_flight)

    committed = threading.Event()

    def commit() -> None:
        time.sleep(1.5)  # the loser's CREATE meets the log folder without a commit
        in_flight.rename(silver / "_delta_log" / first_commit)
        committed.set()

    thread = threading.Thread(target=commit)
    thread.start()
    try:
        layout = ensure_silver(spark, str(silver), "people", SILVER_INPUT, _layout())
        returned_after_commit = committed.is_set()
    finally:
        thread.join()
    assert returned_after_commit  # it waited for the winner's commit
    assert layout.retired_columns == ()
    assert sorted(p.name for p in (silver / "_delta_log").glob("*.json")) == [first_commit]
    assert read_silver_state(str(silver), "people").owner == "people"


def test_a_create_in_a_folder_of_other_files_is_refused_without_touching_them(
    spark: SparkSession, lake: Path
) -> None:
    """Past the plan's JVM-free check (files landing after it): `CREATE TABLE IF NOT EXISTS`
    does nothing on such a folder (Spark sees a table there), and the read-back refuses it at
    once: no wait, no log folder, the files as they were."""
    silver = lake / "silver"
    silver.mkdir()
    (silver / "orders.csv").write_text("id,name\n1,ada\n")
    started = time.monotonic()
    with pytest.raises(TargetOwnershipConflict, match="new or empty location"):
        ensure_silver(spark, str(silver), "people", SILVER_INPUT, _layout())
    assert time.monotonic() - started < CREATE_RACE_WAIT_S
    assert sorted(p.name for p in silver.iterdir()) == ["orders.csv"]
