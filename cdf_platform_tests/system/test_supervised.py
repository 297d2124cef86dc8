"""The production deployment started by its one command, `cdf-platform serve` (supervisord on
`deploy/supervisord.conf`), on a PostgreSQL server and a folder lake with bronze written
continuously: the engine and the daemon killed with SIGKILL are brought back by the supervisor
while the sensors alone keep every silver table at its bronze (nothing lost or applied twice,
never two queued runs of one pipeline), and stopping supervisord by its PID stops every process
it started, the code server included.

One deployment serves the file's tests (`supervised`, module-scoped); the last test stops it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest

from cdf_platform.demo.services import wait_for
from cdf_platform.orchestration.keys import QUEUE_TAG, RUN_KEY_TAG, SILVER_QUEUE
from cdf_platform_testkit.deployment import BronzeWriter
from cdf_platform_testkit.faults.oracle import read_rows
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.postgres import PostgresServer
from cdf_platform_testkit.supervised import (
    DAEMON,
    ENGINE,
    PROGRAMS,
    SupervisedDeployment,
)

pytestmark = [pytest.mark.system, pytest.mark.long(minutes=4), pytest.mark.timeout(900)]

IDS = ["p1", "p2", "p3"]
# The writer's commits after the daemon is back, before it stops and the sensors catch up.
WRITES_AFTER_S = 10.0


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def supervised(
    postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SupervisedDeployment]:
    """The deployment of `IDS` under supervisord, every program answering, a first bronze
    version of each pipeline written; inside its environment. Each story of the file takes it as
    it is: `BronzeWriter(supervised, ...)` commits bronze, `supervised.write_pipelines(...)`
    then `supervised.reload_code()` edits the pipelines file. Stopped by the file's last test
    (else here, at the module's end)."""
    deployment = SupervisedDeployment(
        tmp_path_factory.mktemp("supervised"), postgres, [orders_pipeline(i) for i in IDS]
    )
    first = BronzeWriter(deployment, IDS, interval=0)
    for pipeline_id in IDS:
        first.commit(pipeline_id)
    with deployment.environment():
        try:
            deployment.start()
            yield deployment
        finally:
            deployment.stop()
            deployment.instance().dispose()


def silver_runs_in_progress(instance: dg.DagsterInstance) -> list[dg.RunRecord]:
    return list(
        instance.get_run_records(
            dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={QUEUE_TAG: SILVER_QUEUE})
        )
    )


def sensor_ticked_after(deployment: SupervisedDeployment, since: float) -> bool:
    """Whether the incremental sensor has a tick after `since` (a timestamp)."""
    instance = deployment.instance()
    (sensor,) = [
        state for state in instance.all_instigator_state() if state.name == "incremental_sensor"
    ]
    ticks = instance.get_ticks(sensor.instigator_origin_id, sensor.selector_id, limit=1)
    return bool(ticks) and ticks[0].timestamp > since


def test_the_supervisor_brings_back_a_killed_engine_and_daemon_and_nothing_is_lost(
    supervised: SupervisedDeployment,
) -> None:
    deployment = supervised
    instance = deployment.instance()
    writer = BronzeWriter(deployment, IDS, interval=3.0)
    stop = threading.Event()
    watch, seen = deployment.watch(stop)
    writer.start()
    try:
        wait_for(
            "every silver table loaded",
            lambda: all(s.watermark is not None for s in deployment.statuses().values()),
            300,
        )

        # The engine (its JVM's process group) killed under a silver run: a new one answers.
        in_progress = wait_for(
            "a silver run in progress", lambda: silver_runs_in_progress(instance), 120, 0.2
        )
        engine = deployment.kill(ENGINE)
        new_engine = deployment.wait_back(ENGINE, engine)

        # The daemon killed: a new one beats and the incremental sensor ticks again.
        daemon = deployment.kill(DAEMON)
        new_daemon = deployment.wait_back(DAEMON, daemon)
        back_at = time.time()
        wait_for("an incremental sensor tick", lambda: sensor_ticked_after(deployment, back_at), 60)

        time.sleep(WRITES_AFTER_S)
        writer.stop()
        wait_for("every silver at its bronze", lambda: deployment.caught_up(IDS), 300, 2)
    finally:
        stop.set()
        writer.stop()
    watch.join(timeout=10)
    runs = [record.dagster_run for record in instance.get_run_records(dg.RunsFilter())]

    assert new_engine != engine and new_daemon != daemon
    # The runs the engine died under ended well: a step that met its loss was retried once the
    # supervisor's new engine answered.
    by_id = {run.run_id: run for run in runs}
    ended = {r.dagster_run.run_id: by_id[r.dagster_run.run_id].status for r in in_progress}
    assert set(ended.values()) == {dg.DagsterRunStatus.SUCCESS}, ended
    # Every silver equals its bronze, each change applied once: every run started from the
    # watermark the run before it left.
    for pipeline_id in IDS:
        silver, bronze = deployment.silver(pipeline_id), deployment.bronze(pipeline_id)
        assert _rows(str(silver)) == _rows(str(bronze)), pipeline_id
    assert not deployment.watermark_breaks(IDS)
    # Never two queued runs of one pipeline; each run key requested once (a retry by Dagster's
    # run retries keeps its parent's tags).
    assert seen.samples > 50
    assert max(seen.max_queued_per_pipeline.values(), default=0) <= 1, seen.doubles
    keys = Counter(
        run.tags[RUN_KEY_TAG] for run in runs if RUN_KEY_TAG in run.tags and not run.parent_run_id
    )
    assert not [key for key, n in keys.items() if n > 1]


def test_stopping_the_supervisor_stops_every_process(supervised: SupervisedDeployment) -> None:
    """The last test of the file: it stops the deployment."""
    pids = {program: supervised.pid(program) for program in PROGRAMS}
    assert None not in pids.values(), pids
    stopped_at = time.monotonic()
    left = supervised.stop_and_wait_gone()
    assert not left, [(process.pid, process.cmdline()) for process in left]
    assert not supervised.supervisord.alive()
    print(f"every process gone {time.monotonic() - stopped_at:.1f} s after the stop")


def _rows(path: str) -> list[tuple[Any, ...]]:
    """Sorted rows of the Delta table at `path`, columns not starting with `_` (JVM-free)."""
    columns, rows = read_rows(path)
    kept = [c for c in columns if not c.startswith("_")]
    return sorted(tuple(row[c] for c in kept) for row in rows)
