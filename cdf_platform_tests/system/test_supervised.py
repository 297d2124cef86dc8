"""The production deployment started by its one command, `cdf-platform serve` (supervisord on
`deploy/supervisord.conf`), on a PostgreSQL server and a folder lake with bronze written
continuously: the engine and the daemon killed with SIGKILL are brought back by the supervisor
while the sensors alone keep every silver table at its bronze (nothing lost or applied twice,
never two queued runs of one pipeline), and stopping supervisord by its PID stops every process
it started, the code server included. Under the same deployment, alerts reach real receivers
on loopback (an HTTP server for the webhook and Slack's Web API, an SMTP server): a replay
window at risk, lost and repaired gives each exactly one message of each, across two daemon
restarts and a receiver down for a minute, and no silver run fails because a receiver does.

One deployment serves the file's tests (`supervised`, module-scoped); the last test stops it.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import dagster as dg
import pytest
from dagster._core.scheduler.instigation import TickStatus
from deltalake import DeltaTable

from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.shared.keys import QUEUE_TAG, RUN_KEY_TAG, SILVER_QUEUE, silver_key
from cdf_platform.services.service import wait_for
from cdf_platform_testkit.deployment import BronzeWriter
from cdf_platform_testkit.faults.oracle import read_rows
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.postgres import PostgresServer
from cdf_platform_testkit.receivers import HttpReceiver, SmtpReceiver, alert_targets
from cdf_platform_testkit.supervised import (
    DAEMON,
    ENGINE,
    PROGRAMS,
    SupervisedDeployment,
)

pytestmark = [
    pytest.mark.system,
    pytest.mark.heavy,
    pytest.mark.long(minutes=6),
    pytest.mark.timeout(1200),
]

IDS = ["p1", "p2", "p3"]
# The pipeline whose replay window the alert story puts at risk and loses: its bronze keeps
# 75 s of history, and it is at risk below 45 s of headroom. The checks run launched
# AT_RISK_AFTER_S after the commit has RETENTION_S - AT_RISK_AFTER_S (40 s) to evaluate the
# window before it is lost.
WATCHED = "w"
RETENTION_S = 75
AT_RISK_BELOW_H = 45 / 3600
AT_RISK_AFTER_S = 35
# The alert sensor's ticks after every receiver was told that must tell nothing again.
QUIET_ALERT_TICKS = 2
SLACK_TOKEN_ENV = "CDF_TEST_SLACK_TOKEN"
# The writer's commits after the daemon is back, before it stops and the sensors catch up.
WRITES_AFTER_S = 10.0


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def supervised(
    postgres: PostgresServer,
    alert_receivers: tuple[HttpReceiver, SmtpReceiver],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SupervisedDeployment]:
    """The deployment of `IDS` under supervisord, every program answering, a first bronze
    version of each pipeline written; inside its environment. Each story of the file takes it as
    it is: `BronzeWriter(supervised, ...)` commits bronze, `supervised.write_pipelines(...)`
    then `supervised.reload_code()` edits the pipelines file. Stopped by the file's last test
    (else here, at the module's end)."""
    watched = orders_pipeline(WATCHED, min_headroom_hours=AT_RISK_BELOW_H)
    deployment = SupervisedDeployment(
        tmp_path_factory.mktemp("supervised"),
        postgres,
        [*(orders_pipeline(i) for i in IDS), watched],
        env={SLACK_TOKEN_ENV: "xoxb-test"},
        sections={
            "alerts": {
                "ui_url": "http://dagster.test",
                # Every alert to Slack (its token from the environment), a webhook and email.
                "targets": alert_targets(*alert_receivers, slack_token={"env": SLACK_TOKEN_ENV}),
            }
        },
    )
    first = BronzeWriter(deployment, [*IDS, WATCHED], interval=0)
    for pipeline_id in [*IDS, WATCHED]:
        first.commit(pipeline_id)
    DeltaTable(str(deployment.bronze(WATCHED))).alter.set_table_properties(
        {"delta.deletedFileRetentionDuration": f"interval {RETENTION_S} seconds"}
    )
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


def sensor_ticks(deployment: SupervisedDeployment, name: str, limit: int) -> list[Any]:
    """Sensor `name`'s newest `limit` ticks, newest first."""
    instance = deployment.instance()
    (sensor,) = [state for state in instance.all_instigator_state() if state.name == name]
    return list(instance.get_ticks(sensor.instigator_origin_id, sensor.selector_id, limit=limit))


def alert_ticks_ended_after(deployment: SupervisedDeployment, since: float) -> int:
    """How many of the alert sensor's ticks started after `since` (a timestamp) have ended."""
    ticks = sensor_ticks(deployment, "alert_sensor", QUIET_ALERT_TICKS + 2)
    return sum(
        1 for tick in ticks if tick.timestamp > since and tick.status is not TickStatus.STARTED
    )


def sensor_ticked_after(deployment: SupervisedDeployment, since: float) -> bool:
    """Whether the incremental sensor has a tick after `since` (a timestamp)."""
    ticks = sensor_ticks(deployment, "incremental_sensor", 1)
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


def said(http: HttpReceiver, smtp: SmtpReceiver, pipeline: str) -> dict[str, list[str]]:
    """The titles each receiver got about `pipeline`, in the order it got them."""
    prefix = f"[cdf_platform] {pipeline}: "
    resolved = f"[cdf_platform] RESOLVED {pipeline}: "
    webhook = [
        r["body"]["title"]
        for r in http.received()
        if r["path"] == "/hook" and r["body"]["pipeline"] == pipeline
    ]
    slack = [
        r["body"]["text"].split("*")[1]
        for r in http.received()
        if r["path"] == "/api/chat.postMessage"
    ]
    mail = [r["subject"] for r in smtp.received()]
    return {
        name: [t for t in titles if t.startswith((prefix, resolved))]
        for name, titles in (("webhook", webhook), ("slack", slack), ("email", mail))
    }


def launch_checks(deployment: SupervisedDeployment) -> None:
    launched = deployment.launch("checks_job", {})
    assert launched["__typename"] == "LaunchRunSuccess", launched


def told_or_story(
    what: str,
    probe: Callable[[], bool],
    timeout: float,
    deployment: SupervisedDeployment,
    http: HttpReceiver,
    smtp: SmtpReceiver,
) -> None:
    """`wait_for(what, probe, timeout)`; past the timeout, the error tells the story: what each
    receiver got, the checks runs, the watched window's latest evaluation and the alert
    sensor's last ticks."""
    try:
        wait_for(what, probe, timeout, 1)
    except TimeoutError as err:
        raise TimeoutError(f"{err}\n{alert_story(deployment, http, smtp)}") from None


def alert_story(deployment: SupervisedDeployment, http: HttpReceiver, smtp: SmtpReceiver) -> str:
    instance = deployment.instance()
    lines = [f"told: {said(http, smtp, WATCHED)}"]
    for record in instance.get_run_records(dg.RunsFilter(job_name="checks_job"), limit=5):
        run = record.dagster_run
        lines.append(
            f"checks run {run.run_id[:8]}: {run.status.value}, created {record.create_timestamp}"
            f", started {record.start_time}, ended {record.end_time}"
        )
    key = dg.AssetCheckKey(silver_key(WATCHED), REPLAY_WINDOW)
    latest = instance.event_log_storage.get_latest_asset_check_execution_by_key([key]).get(key)
    if latest is not None and latest.event is not None:
        evaluation = latest.event.dagster_event.event_specific_data  # type: ignore[union-attr]
        lines.append(
            f"replay_window at {latest.event.timestamp}: passed={evaluation.passed}, "
            f"{ {k: v.value for k, v in evaluation.metadata.items()} }"
        )
    for record in deployment.runs_of(WATCHED, time.time() - 600)[:5]:
        run = record.dagster_run
        lines.append(
            f"run of {WATCHED} {run.run_id[:8]} ({run.job_name}): {run.status.value}, "
            f"created {record.create_timestamp}, tags {dict(run.tags)}"
        )
    for tick in sensor_ticks(deployment, "alert_sensor", 4):
        lines.append(
            f"alert tick {tick.timestamp}: {tick.status.value} {tick.skip_reason or ''}"
            f"{tick.error.message if tick.error else ''}"
        )
    return "\n".join(lines)


def test_a_window_at_risk_lost_and_repaired_is_told_once_each_across_restarts(
    supervised: SupervisedDeployment, alert_receivers: tuple[HttpReceiver, SmtpReceiver]
) -> None:
    deployment, (http, smtp) = supervised, alert_receivers
    instance = deployment.instance()
    started = time.time()
    at_risk = [f"[cdf_platform] {WATCHED}: replay window at risk"]
    lost = [
        f"[cdf_platform] {WATCHED}: replay window lost",
        f"[cdf_platform] {WATCHED}: repair started",
    ]
    repaired = [f"[cdf_platform] RESOLVED {WATCHED}: replay window repaired"]
    # Silver stops following bronze: a commit's headroom runs down from RETENTION_S. The stop
    # returns once its last tick has ended; a run that tick requested is waited for.
    deployment.set_sensor("incremental_sensor", running=False)
    try:
        wait_for(f"{WATCHED} at rest", lambda: deployment.caught_up([WATCHED]), 120, 1)
        rest_at = time.time()
        # Two commits: W + 1 is not bronze's latest version, which Delta always lets a read
        # start at; the window loses W + 1 once its commit is older than the retention.
        writer = BronzeWriter(deployment, [WATCHED], interval=0)
        commit = writer.commit(WATCHED)
        writer.commit(WATCHED)
        time.sleep(max(0.0, commit.at + AT_RISK_AFTER_S - time.time()))  # below 45 s
        moved = deployment.runs_of(WATCHED, rest_at)
        assert not moved, f"silver of {WATCHED} moved: {alert_story(deployment, http, smtp)}"
        launch_checks(deployment)
        told_or_story(
            "'at risk' told everywhere",
            lambda: all(t == at_risk for t in said(http, smtp, WATCHED).values()),
            120,
            deployment,
            http,
            smtp,
        )
        first = deployment.kill(DAEMON)
        deployment.wait_back(DAEMON, first)

        # The HTTP receiver (webhook and Slack) is down for a minute while the window is lost
        # and repaired (by the rebuild sensor: the incremental sensor is stopped).
        http.stop()
        down_at = time.monotonic()
        time.sleep(max(0.0, commit.at + RETENTION_S + 5 - time.time()))
        launch_checks(deployment)
        wait_for(
            "'lost' and 'repaired' mailed",
            lambda: said(http, smtp, WATCHED)["email"] == at_risk + lost + repaired,
            240,
            1,
        )
        second = deployment.kill(DAEMON)  # the webhook's and Slack's messages still wait
        deployment.wait_back(DAEMON, second)
        time.sleep(max(0.0, down_at + 60 - time.monotonic()))
        assert said(http, smtp, WATCHED)["webhook"] == at_risk  # nothing got through
        http.start()
        wait_for(
            "every receiver told of the loss and the repair",
            lambda: all(t == at_risk + lost + repaired for t in said(http, smtp, WATCHED).values()),
            180,
            1,
        )
        told_at = time.time()
        # Two more ticks of the alert sensor, started after that: nothing is told again.
        wait_for(
            f"{QUIET_ALERT_TICKS} alert sensor ticks after every receiver was told",
            lambda: alert_ticks_ended_after(deployment, told_at) >= QUIET_ALERT_TICKS,
            120,
            1,
        )
    finally:
        deployment.set_sensor("incremental_sensor", running=True)
    assert all(t == at_risk + lost + repaired for t in said(http, smtp, WATCHED).values())
    # The receivers cost no silver run anything: every one since the story began succeeded.
    silver = [
        r.dagster_run
        for r in instance.get_run_records(
            dg.RunsFilter(
                tags={QUEUE_TAG: SILVER_QUEUE},
                created_after=datetime.datetime.fromtimestamp(started, datetime.UTC),
            )
        )
    ]
    assert silver and {run.status for run in silver} == {dg.DagsterRunStatus.SUCCESS}
    assert _rows(str(deployment.silver(WATCHED))) == _rows(str(deployment.bronze(WATCHED)))
    (webhook_lost,) = [
        r["body"]
        for r in http.received()
        if r["path"] == "/hook"
        and r["body"]["event"] == "window_lost"
        and r["body"]["status"] == "opened"
    ]
    assert webhook_lost["advice"].startswith("nothing: the platform rebuilds")


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
