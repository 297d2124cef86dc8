"""A run killed at each fault point (a subprocess that `os._exit`s there, like a killed driver),
then rerun: the result equals the snapshot oracle (and the quarantine its oracle).

The five killed runs happen in one module fixture (a Spark start costs 20-40 s here): each
`cdf-platform` process whose run needs Spark starts its SparkSession as the fixture begins
(`CliSession`), while the scenarios' tables are prepared in this process, then gets its `run`
command and dies at its fault point. Each test then checks its own kill and rerun.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession

from cdf_platform.core.faults import FAULT_ENV, FAULT_EXIT_CODE, FaultPoint
from cdf_platform.planning.plan import RunMode
from cdf_platform.run.jvm_free.incremental_run import eligible_spec
from cdf_platform.state.quarantine import quarantine_path
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_testkit.faults.bronze_model import BronzeTable
from cdf_platform_testkit.faults.harness import HistoryHarness
from cdf_platform_testkit.faults.history import Op
from cdf_platform_testkit.faults.options import hand_config
from cdf_platform_testkit.faults.oracle import read_silver
from cdf_platform_tests.cli_session import CliSession, SessionEnded

# The module fixture (three concurrent Spark starts) runs inside the first test's timeout.
pytestmark = [pytest.mark.heavy, pytest.mark.long(minutes=2), pytest.mark.timeout(1200)]
ROWS = [{"id": k, "name": f"n{k}", "amount": k * 10} for k in range(1, 9)]
# A row a conforming scenario's `where` keeps and its quarantine rule holds (3 % 7 == 3).
ROWS.append({"id": 9, "name": "n9", "amount": 3})


def _changes(bronze: BronzeTable) -> None:
    """Updates, deletes, a MERGE and an insert after the watermark."""
    bronze.update([1, 2], amount_delta=5, name="upd")
    bronze.delete([3])
    bronze.merge(
        [{"id": 4, "name": "m", "amount": 44}, {"id": 20, "name": "new", "amount": 1}], [5]
    )
    bronze.insert([{"id": 21, "name": "late", "amount": 2}])


def _changes_into_quarantine(bronze: BronzeTable) -> None:
    """Rows that `where` keeps (amount % 5 != 0) and the quarantine rule holds (amount % 7 ==
    3), one that passes both, and held key 9 released: the gate writes the quarantine, then
    silver's MERGE."""
    bronze.update([1], amount_delta=7, name="held")  # 17
    bronze.update([9], amount_delta=1, name="released")  # 4
    bronze.insert(
        [{"id": 22, "name": "held", "amount": 31}, {"id": 23, "name": "ok", "amount": 33}]
    )


def _changes_then_lost_window(bronze: BronzeTable) -> None:
    """Changes whose change files a VACUUM then removes: the run must rebuild."""
    _changes(bronze)
    bronze.vacuum_now(full=True)


@dataclass
class KilledRun:
    """One scenario: its harness (oracle state), the killed process, and the state before."""

    point: FaultPoint
    harness: HistoryHarness
    latest: int
    silver_version: int | None
    watermark: int | None
    control_watermark: object
    returncode: int | None = None
    stderr: str = ""
    killed_at: datetime | None = None


# Seed parity picks the delete mode (odd: soft); all use SNAPSHOT_REBUILD; multiples of 3
# conform rows (a `where`, derived columns and a `quarantine` rule: `hand_config`).
SCENARIOS: dict[FaultPoint, tuple[int, Callable[[BronzeTable], None]]] = {
    FaultPoint.AFTER_READ: (2, _changes),
    FaultPoint.AFTER_MERGE: (5, _changes),
    FaultPoint.BEFORE_CONTROL: (4, _changes),
    FaultPoint.AFTER_QUARANTINE: (12, _changes_into_quarantine),
    FaultPoint.DURING_REBUILD: (9, _changes_then_lost_window),
}


def _pipelines_file(harness: HistoryHarness, path: Path) -> None:
    """The harness's pipeline, every field it sets: the spec silver was built under (another
    `history`, `where` or `columns` would be a spec edit for the killed run to take)."""
    spec = harness.spec
    pipeline = {"id": spec.id, "source": spec.source, "target": spec.target}
    # Unsorted: the derived columns keep their order (another order is another spec).
    fields = pipeline | harness.config.fields()
    path.write_text(yaml.safe_dump({"pipelines": [fields]}, sort_keys=False))


@pytest.fixture(scope="module")
def killed_runs(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[FaultPoint, KilledRun]]:
    """Each scenario loaded once in-process, changed, then run by `cdf-platform run` in its own
    process (Spark started beforehand), killed at its fault point; the processes run
    concurrently."""
    roots = {point: tmp_path_factory.mktemp(f"fault-{point.value}") for point in SCENARIOS}
    harnesses = {
        point: HistoryHarness(spark, roots[point] / "lake", seed, config=hand_config(seed))
        for point, (seed, _) in SCENARIOS.items()
    }
    runs: dict[FaultPoint, KilledRun] = {}
    with ExitStack() as stack:
        # A run the platform makes without Spark (`eligible_spec`: small hard-delete change
        # sets, no conformance) would never use a session started for it.
        sessions = {
            point: stack.enter_context(
                CliSession(
                    {FAULT_ENV: point.value, "CDF_SPARK_MASTER": "local[1]"},
                    root / "cli.log",
                    start_spark=not eligible_spec(harnesses[point].spec),
                )
            )
            for point, root in roots.items()
        }
        for point, (_, change) in SCENARIOS.items():
            root, harness = roots[point], harnesses[point]
            bronze = harness.start(ROWS)
            harness.consumer_run(Op.RUN)  # initial load: watermark 0
            change(bronze)
            control = harness.control.read_states()[harness.spec.id]["last_commit_version"]
            state = read_silver_state(harness.spec.target, harness.spec.id)
            run = KilledRun(
                point, harness, bronze.version, state.silver_version, state.watermark, control
            )
            pipelines = root / "pipelines.yaml"
            _pipelines_file(harness, pipelines)
            run.killed_at = datetime.now(UTC).replace(tzinfo=None)
            command = ["run", harness.spec.id, "--pipelines", str(pipelines)]
            sessions[point].send(*command, "--control-root", harness.control.root)
            runs[point] = run
        for point, run in runs.items():
            try:
                run.returncode, _ = sessions[point].result()
            except SessionEnded as ended:
                run.returncode = ended.returncode
            run.stderr = sessions[point].stderr_tail()
    yield runs


def _killed(runs: dict[FaultPoint, KilledRun], point: FaultPoint) -> KilledRun:
    """The run killed at `point`, after checking it died there."""
    run = runs[point]
    assert run.returncode == FAULT_EXIT_CODE, run.stderr[-3000:]
    return run


def _assert_nothing_applied(run: KilledRun) -> None:
    harness = run.harness
    state = read_silver_state(harness.spec.target, harness.spec.id)
    assert state.silver_version == run.silver_version
    assert state.watermark == run.watermark
    control = harness.control.read_states()[harness.spec.id]["last_commit_version"]
    assert control == run.control_watermark == run.watermark


def test_killed_after_read_leaves_silver_untouched_and_rerun_converges(
    killed_runs: dict[FaultPoint, KilledRun],
) -> None:
    run = _killed(killed_runs, FaultPoint.AFTER_READ)
    _assert_nothing_applied(run)
    harness = run.harness
    assert harness.bronze is not None
    harness.bronze.delete([1])  # a commit between the crash and the rerun
    harness.consumer_run(Op.RUN)
    assert harness.report.modes == {"initial_load": 1, "incremental": 1}


@pytest.mark.parametrize("point", [FaultPoint.AFTER_MERGE, FaultPoint.BEFORE_CONTROL])
def test_killed_after_merge_keeps_the_atomic_watermark_and_rerun_repairs_control(
    killed_runs: dict[FaultPoint, KilledRun], point: FaultPoint
) -> None:
    """Killed right after the MERGE (soft deletes), or after its figures were read, just
    before the control-table write (hard deletes)."""
    run = _killed(killed_runs, point)
    harness = run.harness
    # The MERGE committed with its watermark: silver is the oracle's at the pinned version...
    assert read_silver_state(harness.spec.target, harness.spec.id).watermark == run.latest
    assert run.killed_at is not None
    harness.verify_silver(RunMode.INCREMENTAL, None, run.latest, run.killed_at)
    # ...while the control table still holds the old watermark until a rerun repairs it.
    control = harness.control.read_states()[harness.spec.id]["last_commit_version"]
    assert control == run.control_watermark == run.watermark
    assert harness.bronze is not None
    if point is FaultPoint.AFTER_MERGE:
        harness.consumer_run(Op.RUN)  # no-op that repairs the control table (checked)
        harness.bronze.update([2, 4], amount_delta=1, name="again")
        harness.consumer_run(Op.RUN)
        assert harness.report.modes == {"initial_load": 1, "noop": 1, "incremental": 1}
    else:
        # Bronze moves before the rerun: the rerun records the killed run's commit, then its own.
        harness.bronze.update([2, 4], amount_delta=1, name="again")
        harness.consumer_run(Op.RUN)
        assert harness.report.modes == {"initial_load": 1, "incremental": 1}
    log = sorted(harness.control.read_log(harness.spec.id), key=lambda row: row["finished_at"])
    assert [row["outcome"] for row in log] == ["SUCCESS", "REPAIRED", "SUCCESS"]
    assert (log[1]["watermark_before"], log[1]["watermark_after"]) == (run.watermark, run.latest)
    # Every silver commit has its row, each starting where the one before ended.
    for previous, row in itertools.pairwise(log):
        assert row["watermark_before"] == previous["watermark_after"], row


def test_killed_during_rebuild_leaves_silver_untouched_and_rerun_rebuilds(
    killed_runs: dict[FaultPoint, KilledRun],
) -> None:
    run = _killed(killed_runs, FaultPoint.DURING_REBUILD)
    _assert_nothing_applied(run)
    harness = run.harness
    harness.consumer_run(Op.RUN)  # the ground truth says lost: a rebuild is required
    assert harness.report.modes == {"initial_load": 1, "rebuild": 1}
    assert harness.report.detected_losses == harness.report.actual_losses == 1
    assert harness.report.silent_losses == 0


def test_killed_after_the_quarantine_leaves_it_ahead_of_silver_and_rerun_converges(
    killed_runs: dict[FaultPoint, KilledRun],
) -> None:
    """The quality gate writes the quarantine before silver's MERGE: killed between the two,
    the quarantine holds the run's failing rows while silver and its watermark are as before;
    the rerun writes the same quarantine and silver (the harness checks both oracles)."""
    run = _killed(killed_runs, FaultPoint.AFTER_QUARANTINE)
    _assert_nothing_applied(run)
    harness = run.harness
    held = harness.control.query(
        quarantine_path(harness.control.root, harness.spec.id), "SELECT id FROM t"
    )
    # 1 and 22 held, 9 released (held after the initial load), while silver lacks all three.
    assert sorted(row["id"] for row in held) == [1, 22]
    assert not {1, 9, 22} & set(read_silver(harness.spec.target).rows)
    harness.consumer_run(Op.RUN)
    assert harness.report.modes == {"initial_load": 1, "incremental": 1}
