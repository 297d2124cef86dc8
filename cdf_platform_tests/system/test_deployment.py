"""cdf_platform deployed as a team runs Dagster (`deploy/dagster.yaml` on PostgreSQL, the warm
engine, the reloadable code server, the daemon with the queued run coordinator, the webserver),
with bronze written continuously and processes dying: the sensors alone bring every silver
table to its bronze, the queue never holds two runs of one pipeline, no change is lost or
applied twice, a killed run's pipeline catches up without a person, the engine killed under
runs in flight (twice: away for minutes, then restarted at once) costs retries only while runs
started meanwhile wait for it. While it is away the run worker, PostgreSQL and the daemon die
too, a pipelines-file edit is taken by a reload of the code location, and a replay window is
destroyed: its repair is requested within a tick or two, and every pipeline, the added and the
repaired one too, is caught up within a minute of the engine's return. The story prints where
its seconds went (`Phases`). A read-only webserver serves the checks' figures and refuses
launches, and a destructive run config launched from the operator's UI is refused by the
deployment. A second deployment, on S3 with credentials from `{env:}` and `dg.EnvVar`, writes
no secret anywhere (`cdf_platform_tests.system.secret_search`)."""

from __future__ import annotations

import contextlib
import datetime
import itertools
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import psutil
import pytest
import yaml
from pyspark.sql import SparkSession

from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV, REMOTE_ENV
from cdf_platform.orchestration.jobs.maintenance_jobs import MAINTENANCE_JOB, maintenance_run_config
from cdf_platform.orchestration.jobs.silver_jobs import CHECKS_JOB, rebuild_run_config
from cdf_platform.orchestration.run_launcher import RUN_WORKER_TAG
from cdf_platform.orchestration.shared.keys import QUEUE_TAG, RUN_KEY_TAG, SILVER_QUEUE
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform.services.service import wait_for
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.deployment import (
    BronzeWriter,
    Deployment,
    Phases,
    covered,
)
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.postgres import PostgresServer
from cdf_platform_tests.lake_platform import table_rows, vacuum_breaking_the_window
from cdf_platform_tests.system.secret_search import (
    BUCKET_A,
    BUCKET_B,
    DEFINITIONS,
    NO_AMBIENT_CREDENTIALS,
    database_hits,
    file_hits,
    lake_hits,
    orders_table,
    runs_of_instance,
    s3_options,
    table_version,
    write_bronze,
)

pytestmark = [
    pytest.mark.system,
    pytest.mark.heavy,
    pytest.mark.long(minutes=9),
    pytest.mark.timeout(1800),
]

WRITTEN = ["p1", "p2"]  # the writer's tables
LOST = "p3"  # written by the test only: its window is destroyed while the daemon is down
ADDED = "p4"  # added to the pipelines file mid-way, taken by a reload of the code location
IDS = [*WRITTEN, LOST]
# A tick or two of the incremental sensor (5 s), plus the daemon's start.
TWO_TICKS_S = 60.0
# From a reload to the added pipeline's first run: the daemon takes the reloaded location's
# definitions at its next workspace refresh (every 60 s: Dagster's RELOAD_WORKSPACE_INTERVAL),
# then a tick or two requests the run.
ADDED_REQUESTED_WITHIN_S = 60.0 + TWO_TICKS_S
# The writer's commits after the engine's second restart (its interval is 4 s), while the runs
# that met the engine's death are retried.
WRITES_AFTER_S = 10.0
# The incremental sensor's ticks (every 5 s) after catching up that must request nothing.
QUIET_TICKS_S = 20.0
# How long the engine stays away under runs (its supervisor restarts it after an outage of
# minutes), and within how long of its return every pipeline reaches the bronze of that moment.
ENGINE_OUTAGE_S = 180.0
ENGINE_RETURN_CATCH_UP_S = 60.0


def _run_of_process(instance: dg.DagsterInstance, pid: int) -> dg.DagsterRun | None:
    """The run in progress whose process is `pid` (its engine event names the process)."""
    started = instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    for record in started:
        run = record.dagster_run
        events = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT)
        if any(f"Started process for run (pid: {pid})" in e.message for e in events):
            return run
    return None


def kill_a_run_mid_way(deployment: Deployment, instance: dg.DagsterInstance) -> str:
    """Kill (SIGKILL) the process of a run in progress (its work on the engine goes on until
    the engine drops it); return the run's id once it is marked failed. A run whose last event
    was written just before the kill ends as it was (success), as does one whose process ended
    between being listed and the kill: then another run is killed."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        for worker in deployment.run_processes():
            run = _run_of_process(instance, worker.pid)
            if run is None:
                continue
            # It may have ended on its own since it was listed (the run finished): the wait
            # below then sees the run as it ended, and another run is killed.
            with contextlib.suppress(psutil.NoSuchProcess):
                worker.kill()
            ended = wait_for(
                f"run {run.run_id} ended after its process was killed",
                lambda run_id=run.run_id: _finished(instance, run_id),
                120,
            )
            if ended.status is dg.DagsterRunStatus.FAILURE:
                return run.run_id
        time.sleep(0.2)
    raise AssertionError("no run in progress to kill within 300 s")


def kill_the_engine_under_runs(deployment: Deployment, instance: dg.DagsterInstance) -> float:
    """Kill the engine (SIGKILL) once a silver run is in progress, and return when it was
    killed, once a run has met its absence: a step failed as the engine's loss, or a run that
    needed a session waits for it."""
    wait_for(
        "a silver run in progress",
        lambda: instance.get_run_records(
            dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={QUEUE_TAG: SILVER_QUEUE})
        ),
        300,
        0.2,
    )
    killed_at = time.time()
    deployment.engine.kill()
    url = str(deployment.env[REMOTE_ENV])
    wait_for(
        "a run meeting the engine's absence", lambda: engine_met(instance, url, killed_at), 120
    )
    return killed_at


def restart_the_engine_under_runs(deployment: Deployment, instance: dg.DagsterInstance) -> float:
    """Kill the engine under runs and start it again once a run has met its absence (as a
    supervisor would, a few seconds later); return when it was killed."""
    killed_at = kill_the_engine_under_runs(deployment, instance)
    deployment.start_engine()
    return killed_at


def bring_the_engine_back(
    deployment: Deployment, instance: dg.DagsterInstance, killed_at: float
) -> tuple[float, dict[str, int], set[str]]:
    """End an outage of the engine of at least ENGINE_OUTAGE_S (as its supervisor would after
    an outage of minutes); return when it answered again, each pipeline's bronze version then,
    and the runs that waited for it meanwhile (their log says so, naming the engine)."""
    time.sleep(max(0.0, killed_at + ENGINE_OUTAGE_S - time.time()))
    deployment.start_engine()
    back_at = time.time()
    bronze = {
        spec["id"]: table_version(str(deployment.bronze(spec["id"])), {})
        for spec in deployment.pipelines
    }
    url = str(deployment.env[REMOTE_ENV])
    waited = engine_met(instance, url, killed_at, failed=False)
    return back_at, bronze, waited


def engine_met(
    instance: dg.DagsterInstance, url: str, since: float, *, failed: bool = True
) -> set[str]:
    """The silver runs whose log, since `since`, says that they waited for the engine at `url`
    (`engine unreachable at <url> since ...`) or, with `failed`, that a step failed as the
    engine's loss."""
    after = datetime.datetime.fromtimestamp(since, datetime.UTC)
    records = [
        *instance.get_run_records(
            dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={QUEUE_TAG: SILVER_QUEUE})
        ),
        *instance.get_run_records(
            dg.RunsFilter(tags={QUEUE_TAG: SILVER_QUEUE}, updated_after=after)
        ),
    ]
    met = set()
    for record in records:
        run_id = record.dagster_run.run_id
        for event in instance.all_logs(run_id):
            if event.timestamp < since:
                continue
            if f"engine unreachable at {url} since" in event.message or (
                failed and "EngineUnavailable" in str(event.dagster_event or "")
            ):
                met.add(run_id)
                break
    return met


def restart_the_run_worker_under_runs(
    deployment: Deployment, instance: dg.DagsterInstance
) -> tuple[str, str]:
    """Kill the run worker's process group (SIGKILL: the run processes it forked die with it)
    once it runs a silver run; wait until a run is launched while it is down (through the code
    server), then start it again. Returns (the run killed with it, the run launched without
    it)."""

    def forked_run() -> str | None:
        for record in instance.get_run_records(
            dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED], tags={QUEUE_TAG: SILVER_QUEUE})
        ):
            if record.dagster_run.tags.get(RUN_WORKER_TAG):
                return record.dagster_run.run_id
        return None

    killed: str = wait_for("a silver run started by the run worker", forked_run, 300, 0.2)
    down_at = datetime.datetime.now(datetime.UTC)
    deployment.run_worker.kill()
    launched = wait_for(
        "a silver run launched while the run worker is down",
        lambda: [
            record.dagster_run.run_id
            for record in instance.get_run_records(
                dg.RunsFilter(tags={QUEUE_TAG: SILVER_QUEUE}, created_after=down_at)
            )
            if record.start_time is not None
        ],
        120,
    )
    deployment.start_run_worker()
    return killed, launched[0]


def _engine_failure_messages(event: dg.EventLogEntry) -> list[str]:
    """The message of the step failure `event` names the engine's loss in (a retried step's
    failure is the cause of Dagster's retry request), its own causes left out."""
    error = getattr(getattr(event.dagster_event, "event_specific_data", None), "error", None)
    while error is not None:
        if "EngineUnavailable" in error.message:
            return [error.message]
        error = error.cause
    return []


def engine_failures(instance: dg.DagsterInstance) -> list[str]:
    """The ids of silver runs with a step that failed on the engine's loss (retried or not)."""
    found = []
    for record in instance.get_run_records(dg.RunsFilter(tags={QUEUE_TAG: SILVER_QUEUE})):
        run_id = record.dagster_run.run_id
        events = [
            *instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE),
            *instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_UP_FOR_RETRY),
        ]
        if any("EngineUnavailable" in str(event.dagster_event) for event in events):
            found.append(run_id)
    return found


# What anyone who reaches a UI could ask for: VACUUM RETAIN 0 HOURS cutting p1's window.
DESTRUCTIVE_VACUUM = maintenance_run_config("bronze/p1", retain_zero=True, allow_window_loss=True)
CHECK_FIGURES = """
{
  assetCheckExecutions(assetKey: {path: ["silver", "p1"]}, checkName: "consumer_lag", limit: 5) {
    status
    evaluation { metadataEntries { label __typename } }
  }
}
"""


def watch_and_try_to_destroy(deployment: Deployment, instance: dg.DagsterInstance) -> str:
    """The read-only UI serves the checks' plotted figures and refuses a launch; the operator's
    UI launches the destructive VACUUM, which the deployment (no CDF_ALLOW_DESTRUCTIVE) refuses.
    Returns that run's id once it has ended."""
    deployment.start_read_only_webserver()
    port = deployment.read_only_port
    executions = deployment.graphql(CHECK_FIGURES, port=port)["data"]["assetCheckExecutions"]
    assert executions, "the read-only UI shows no consumer_lag evaluation"
    plotted = {
        (entry["label"], entry["__typename"])
        for execution in executions
        for entry in (execution["evaluation"] or {}).get("metadataEntries", [])
    }
    assert ("lag_hours", "FloatMetadataEntry") in plotted, plotted
    at_door = deployment.launch(MAINTENANCE_JOB, DESTRUCTIVE_VACUUM, port=port)
    assert at_door["__typename"] == "UnauthorizedError", at_door
    launched = deployment.launch(MAINTENANCE_JOB, DESTRUCTIVE_VACUUM)
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id: str = launched["run"]["runId"]
    wait_for("the destructive VACUUM run ended", lambda: _finished(instance, run_id), 120)
    return run_id


def _finished(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun | None:
    run = instance.get_run_by_id(run_id)
    return run if run is not None and run.is_finished else None


@pytest.fixture(scope="module")
def postgres() -> Any:
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def s3() -> Iterator[LocalS3Server]:
    """The secrets test's S3 server, with its two buckets."""
    with LocalS3Server(bucket=BUCKET_A) as server:
        request = urllib.request.Request(f"{server.endpoint}/{BUCKET_B}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        yield server


def test_sensors_alone_keep_every_silver_in_step_through_process_faults(
    spark: SparkSession, postgres: PostgresServer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root: Path = tmp_path_factory.mktemp("deployment")
    # The engine's outages are this story's: every silver run goes through Spark (small SCD1
    # change sets would need none).
    deployment = Deployment(
        root, postgres, [orders_pipeline(i) for i in IDS], env={JVM_FREE_MERGE_MAX_ROWS_ENV: "0"}
    )
    writer = BronzeWriter(deployment, WRITTEN, interval=4.0)
    for pipeline_id in IDS:
        writer.commit(pipeline_id)
    phases = Phases()
    with deployment.environment():
        instance = deployment.instance()
        stop = threading.Event()
        try:
            deployment.start()
            watch, seen = deployment.watch(stop)
            writer.start()
            phases.done("the deployment started")
            # No launch by the test from here on: the sensors request every run.
            wait_for(
                "every silver table loaded",
                lambda: all(s.watermark is not None for s in deployment.statuses().values()),
                300,
            )
            phases.done("every silver loaded")

            # A run's process killed mid-run.
            killed_ids = {kill_a_run_mid_way(deployment, instance)}
            phases.done("a run's process killed mid-run")

            # The engine killed under a run in flight and away for minutes, runs waiting for it.
            first_engine_kill = kill_the_engine_under_runs(deployment, instance)
            phases.done("the engine killed under runs")

            # Meanwhile a pipeline added to the pipelines file, taken by a reload of the code
            # location (no restart): the daemon requests its first run, which waits for the
            # engine with the others.
            writer.commit(ADDED)
            deployment.write_pipelines([*deployment.pipelines, orders_pipeline(ADDED)])
            reloaded_at = time.time()
            deployment.reload_code()
            try:
                wait_for(
                    "the added pipeline's first run requested after the reload",
                    lambda: deployment.runs_of(ADDED, reloaded_at),
                    ADDED_REQUESTED_WITHIN_S + 30,
                )
            except TimeoutError as timeout:
                raise AssertionError(
                    f"{timeout}\n{deployment.account(ADDED, reloaded_at)}"
                ) from timeout
            added_requested_s = time.time() - reloaded_at
            phases.done("a pipeline added by a reload: its first run requested")

            # Meanwhile the run worker killed with its run processes, runs launched without it,
            # restarted.
            worker_killed, without_worker = restart_the_run_worker_under_runs(deployment, instance)
            phases.done("the run worker killed, a run launched without it, restarted")

            # PostgreSQL restarted under the daemon, the code server, the webserver and runs.
            postgres.restart()
            phases.done("PostgreSQL restarted")

            # The daemon killed; while it is down, a window is destroyed. Its repair, requested
            # by the restarted daemon's first ticks, waits for the engine too.
            wait_for("p3 caught up", lambda: deployment.caught_up([LOST]), 300)
            deployment.daemon.kill()
            writer.commit(LOST)
            writer.commit(LOST)
            vacuum_breaking_the_window(spark, str(deployment.bronze(LOST)))
            restarted_at = time.time()
            deployment.start_daemon()
            wait_for(
                "a run of p3 after the restart",
                lambda: deployment.runs_of(LOST, restarted_at),
                TWO_TICKS_S,
            )
            phases.done("the daemon killed, a window destroyed, the daemon's repair requested")

            # The engine back: every pipeline, the added one and the one to repair too, reaches
            # the bronze of that moment within a minute.
            back_at, bronze_at_return, waited_for_engine = bring_the_engine_back(
                deployment, instance, first_engine_kill
            )
            phases.done("the rest of the engine's outage")
            wait_for(
                "every pipeline at its bronze of the engine's return",
                lambda: all(
                    (deployment.statuses()[pipeline_id].watermark or -1) >= version
                    for pipeline_id, version in bronze_at_return.items()
                ),
                ENGINE_RETURN_CATCH_UP_S + 30,
                1,
            )
            caught_up_after_return_s = time.time() - back_at
            phases.done("every pipeline caught up after the engine's return")

            # The engine restarted a second time under load.
            second_engine_kill = restart_the_engine_under_runs(deployment, instance)
            time.sleep(WRITES_AFTER_S)  # the writer goes on through the repairs
            writer.stop()
            every = [*IDS, ADDED]
            wait_for("every silver at its bronze", lambda: deployment.caught_up(every), 400, 2)
            caught_up_at = time.monotonic()
            phases.done("the engine restarted under runs, every silver at its bronze")
            bronze_files = sorted(str(f) for f in deployment.bronze("p1").rglob("*.parquet"))
            destructive_run = watch_and_try_to_destroy(deployment, instance)
            # Ticks after catching up (and after the refused VACUUM) request nothing more.
            time.sleep(max(0.0, caught_up_at + QUIET_TICKS_S - time.monotonic()))
            assert deployment.caught_up(every)
            phases.done("the read-only UI, the refused VACUUM, quiet ticks")
        finally:
            stop.set()
            writer.stop()
            deployment.stop()
            print(phases)
        processes = deployment.processes()
        assert not processes, f"left running: {processes}"

        runs = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter())]
        records = instance.get_run_records(dg.RunsFilter())
        failed_on_engine = engine_failures(instance)
        engine_messages = [
            message
            for run_id in failed_on_engine
            for event in instance.all_logs(
                run_id,
                of_type={dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.STEP_UP_FOR_RETRY},
            )
            for message in _engine_failure_messages(event)
        ]
        refusals = [
            str(
                event.dagster_event.step_failure_data.user_failure_data.metadata[
                    "incident_code"
                ].value
            )
            for event in instance.all_logs(
                destructive_run, of_type=dg.DagsterEventType.STEP_FAILURE
            )
            if event.dagster_event and event.dagster_event.step_failure_data.user_failure_data
        ]
        worker_failure = " ".join(
            str(event.message)
            for event in instance.all_logs(worker_killed, of_type=dg.DagsterEventType.RUN_FAILURE)
        )
        fallback_events = [
            str(event.message)
            for event in instance.all_logs(without_worker, of_type=dg.DagsterEventType.ENGINE_EVENT)
        ]
        instance.dispose()
    by_id = {run.run_id: run for run in runs}
    watch.join(timeout=10)
    every = [*IDS, ADDED]

    # Every silver equals its bronze.
    for pipeline_id in every:
        silver, bronze = deployment.silver(pipeline_id), deployment.bronze(pipeline_id)
        assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze)), pipeline_id

    # A step whose engine died under it failed as the engine's loss, said in words with the
    # engine's address, and was retried; runs that needed the engine while it was away waited
    # for it, and every pipeline was caught up within a minute of its return.
    assert second_engine_kill > first_engine_kill
    assert len(engine_messages) >= len(failed_on_engine)
    for message in engine_messages:
        assert str(deployment.env[REMOTE_ENV]) in message, message
        assert "_InactiveRpcError" not in message, message
    assert waited_for_engine, "no run waited for the engine while it was away"
    assert caught_up_after_return_s <= ENGINE_RETURN_CATCH_UP_S, caught_up_after_return_s
    # The reload's added pipeline was requested by the sensors within the daemon's refresh and
    # a tick or two (and loaded with the others after the engine's return, above).
    assert added_requested_s <= ADDED_REQUESTED_WITHIN_S, added_requested_s

    # Never two queued runs of one pipeline.
    assert seen.samples > 100
    assert max(seen.max_queued_per_pipeline.values(), default=0) <= 1, (
        seen,
        {run_id: by_id[run_id].tags for run_id, _, _ in (seen.doubles or [[]])[0]},
    )

    # The destructive VACUUM, launched through the operator's UI, was refused by the deployment
    # (no CDF_ALLOW_DESTRUCTIVE): nothing vacuumed, the refusal in the maintenance log.
    assert by_id[destructive_run].status is dg.DagsterRunStatus.FAILURE
    assert refusals == ["DESTRUCTIVE_ACTION_NOT_PERMITTED"], refusals
    assert sorted(str(f) for f in deployment.bronze("p1").rglob("*.parquet")) == bronze_files
    maintenance = ControlTable(deployment.lake_layout.bound().control().root)
    assert [
        (row["run_id"], row["outcome"])
        for row in maintenance.read_maintenance_log(str(deployment.bronze("p1")))
    ] == [(destructive_run, "not_permitted")]

    # Every run the sensors requested, or the checks schedule (it fires on the quarter hour),
    # or Dagster's run retries: no test launch but the destructive VACUUM. Each run key once.
    launched_by_hand = [
        (run.job_name, run.tags)
        for run in runs
        if run.run_id != destructive_run
        and not (
            run.tags.get("dagster/sensor_name")
            or (run.tags.get("dagster/schedule_name") and run.job_name == CHECKS_JOB)
            or run.parent_run_id
        )
    ]
    assert not launched_by_hand
    # (A retry by Dagster's run retries keeps its parent's tags, the run key among them.)
    keys = Counter(
        run.tags[RUN_KEY_TAG] for run in runs if RUN_KEY_TAG in run.tags and not run.parent_run_id
    )
    assert not [key for key, n in keys.items() if n > 1]

    # Runs of one pipeline never overlapped.
    for pipeline_id in every:
        spans = sorted(
            (r.start_time, r.end_time, r.dagster_run.run_id, r.dagster_run.status.value)
            for r in records
            if pipeline_id in covered(r.dagster_run) and r.start_time and r.end_time
        )
        for (_, end, *earlier), (start, _, *later) in itertools.pairwise(spans):
            assert start >= end - 0.5, (pipeline_id, earlier, later, end, start)

    # Nothing applied twice, nothing skipped: each run started from the watermark the last
    # one left.
    assert not deployment.watermark_breaks(every)
    control = ControlTable(deployment.lake_layout.bound().control().root)

    # The run the run worker took down with it was found dead by run monitoring (its process
    # gone), not left running until max_runtime_seconds; runs started while the worker was down
    # went through the code server; every other silver run was a fork of the worker.
    (gone,) = [record for record in records if record.dagster_run.run_id == worker_killed]
    assert gone.dagster_run.status is dg.DagsterRunStatus.FAILURE
    assert "is gone without ending the run" in worker_failure
    assert not by_id[without_worker].tags.get(RUN_WORKER_TAG)
    assert any("did not answer" in message for message in fallback_events)
    forked = [run for run in runs if run.job_name != CHECKS_JOB and run.tags.get(RUN_WORKER_TAG)]
    assert len(forked) >= len([run for run in runs if run.job_name != CHECKS_JOB]) // 2

    # The killed run's pipelines caught up without a person: each has a later successful run.
    (killed,) = [run for run in runs if run.run_id in killed_ids][:1]
    for pipeline_id in covered(killed):
        assert [
            r
            for r in records
            if pipeline_id in covered(r.dagster_run)
            and r.dagster_run.status is dg.DagsterRunStatus.SUCCESS
            and r.create_timestamp.timestamp() > _created(records, killed.run_id)
        ], pipeline_id

    # The destroyed window: one repair, requested by the incremental sensor's first ticks.
    rebuilds = [
        row
        for row in control.read_log(LOST)
        if row["incident_code"] == "WATERMARK_OUTSIDE_RETENTION" and row["mode"] == "rebuild"
    ]
    assert len(rebuilds) == 1, rebuilds
    (repair,) = [
        r
        for r in records
        if r.dagster_run.tags.get(RUN_KEY_TAG, "").startswith(f"repair:{LOST}:")
        and not r.dagster_run.parent_run_id
    ]
    assert repair.create_timestamp.timestamp() - restarted_at <= TWO_TICKS_S
    assert repair.start_time <= rebuilds[0]["started_at"].timestamp() <= repair.end_time


def _created(records: list[Any], run_id: str) -> float:
    (record,) = [r for r in records if r.dagster_run.run_id == run_id]
    return float(record.create_timestamp.timestamp())


def test_no_secret_reaches_a_log_a_table_or_the_lake(
    s3: LocalS3Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """See `cdf_platform_tests.system.secret_search`: a deployment of its own (and its own
    PostgreSQL: every table of it is searched), in this file so that it never runs beside the
    deployment above (each test file runs in one test process)."""
    root: Path = tmp_path_factory.mktemp("secrets")
    secrets = {
        "the pipelines file's {env:} secret": f"envsecret-{uuid.uuid4().hex}",
        "the lake resource's dg.EnvVar secret": f"envvarsecret-{uuid.uuid4().hex}",
    }
    secret_a, secret_b = secrets.values()
    key_a, key_b = f"keya{uuid.uuid4().hex[:12]}", f"keyb{uuid.uuid4().hex[:12]}"
    options_a = s3_options(s3, key_a, secret_a)
    options_b = s3_options(s3, key_b, secret_b)

    # Bronze: p1 in bucket a, p2 in bucket b, and `dupes` (bucket a) with a key twice in one
    # commit: its run fails (DATA_QUALITY).
    write_bronze(f"s3://{BUCKET_A}/bronze/p1", orders_table(list(range(1, 21)), 10), options_a)
    write_bronze(f"s3://{BUCKET_B}/bronze/p2", orders_table(list(range(1, 21)), 20), options_b)
    write_bronze(f"s3://{BUCKET_A}/bronze/dupes", orders_table([1, 1, 2], 30), options_a)
    pipelines = {
        "storage": {
            f"s3://{BUCKET_A}": {
                "endpoint": s3.endpoint,
                "region": "us-east-1",
                "allow_http": True,
                "access_key_id": {"env": "CDF_TEST_KEY_A"},
                "secret_access_key": {"env": "CDF_TEST_SECRET_A"},
            }
        },
        "pipelines": [
            {
                "id": pipeline_id,
                "source": f"s3://{bucket}/bronze/{pipeline_id}",
                "target": f"s3://{bucket}/silver/{pipeline_id}",
                "keys": ["order_id"],
            }
            for pipeline_id, bucket in (("p1", BUCKET_A), ("p2", BUCKET_B), ("dupes", BUCKET_A))
        ],
    }
    silvers = {
        f"s3://{BUCKET_A}/silver/p1": options_a,
        f"s3://{BUCKET_B}/silver/p2": options_b,
    }
    definitions = root / "secret_location.py"
    definitions.write_text(DEFINITIONS, encoding="utf-8")
    postgres = PostgresServer().start()
    deployment = Deployment(
        root,
        postgres,
        [],
        warm=False,
        code=["-f", str(definitions)],
        env={
            **NO_AMBIENT_CREDENTIALS,
            "CDF_LAKE_ROOT": f"s3://{BUCKET_A}/lake",
            "CDF_TEST_S3_ENDPOINT": s3.endpoint,
            "CDF_TEST_KEY_A": key_a,
            "CDF_TEST_SECRET_A": secret_a,
            "CDF_TEST_KEY_B": key_b,
            "CDF_TEST_SECRET_B": secret_b,
            "CDF_SPARK_LOG": str(root / "logs" / "spark.log"),
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
    )
    deployment.pipelines_file.write_text(yaml.safe_dump(pipelines), encoding="utf-8")

    with deployment.environment():
        instance = deployment.instance()
        try:
            deployment.start()

            def loaded() -> bool:
                failed = [
                    r for r in runs_of_instance(instance) if r.status is dg.DagsterRunStatus.FAILURE
                ]
                return bool(failed) and all(
                    table_version(uri, options) >= 1 for uri, options in silvers.items()
                )

            wait_for("p1 and p2 loaded, and a run of dupes failed", loaded, 400, 2)
            launched = deployment.launch(
                "rebuild_job",
                rebuild_run_config("p1").to_config_dict(),
                assets=[("silver", "p1")],
            )
            assert launched["__typename"] == "LaunchRunSuccess", launched
            rebuild = str(launched["run"]["runId"])

            def rebuilt() -> dg.DagsterRun | None:
                run = instance.get_run_by_id(rebuild)
                return run if run is not None and run.is_finished else None

            finished = wait_for("the rebuild of p1", rebuilt, 300, 2)
            assert finished.status is dg.DagsterRunStatus.SUCCESS
            time.sleep(5)  # the sensors' next ticks, with their logs
        finally:
            deployment.stop()
        assert not deployment.processes()

        incidents = [
            str(failure.user_failure_data.metadata["incident_code"].value)
            for run in runs_of_instance(instance)
            if run.status is dg.DagsterRunStatus.FAILURE
            for event in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
            if event.dagster_event is not None
            and (failure := event.dagster_event.step_failure_data).user_failure_data is not None
        ]
        assert "DATA_QUALITY" in incidents, incidents
        instance.dispose()

    # Silver was written with those credentials (bucket b's came from the dg.EnvVar only),
    # p1 twice more by its rebuild.
    assert table_version(f"s3://{BUCKET_A}/silver/p1", options_a) >= 2

    # Searched: the database, the lake, and every file of the deployment's folder: the
    # instance's compute logs (each step's stdout and stderr, Spark's console among them), the
    # processes' logs, the pipelines file and the code location (which name the variables).
    compute_logs = [p for p in (root / "dagster_home").rglob("*") if p.is_file()]
    assert any("spark" in p.read_text(errors="replace").lower() for p in compute_logs)
    try:
        found = database_hits(postgres, secrets)
    finally:
        postgres.stop()
        postgres.cleanup()
    found += [*lake_hits(s3, options_a, secrets), *file_hits(root, secrets)]
    assert not found, found
