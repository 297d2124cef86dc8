"""The system tests' PostgreSQL server: a Postgres-backed Dagster instance keeps its runs across
a crash and a restart of the server, which is stopped by its PID; a failed start says why. The
deployment's instance keeps its connections between reads and writes, and a forked child never
uses its parent's."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import dagster as dg
import psycopg2
import pytest

from cdf_platform.orchestration.instance_storage import KEPT_CONNECTIONS, kept_engine
from cdf_platform.orchestration.shared.keys import QUEUE_TAG, SILVER_QUEUE
from cdf_platform_testkit.postgres import MAX_CONNECTIONS, PostgresServer, PostgresServerError

# The deployment's instance: its postgres_db settings come from the environment.
DAGSTER_YAML = Path(__file__).resolve().parents[2] / "deploy" / "dagster.yaml"


@dg.asset
def orders() -> int:
    """One row, enough for a run and a materialization to be stored."""
    return 1


def _query(postgres: PostgresServer, statement: str, *params: object) -> list[tuple[Any, ...]]:
    """The rows of `statement`, over a connection of its own."""
    connection = postgres.connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement, params or None)
            return list(cursor.fetchall())
    finally:
        connection.close()


def _setting(postgres: PostgresServer, name: str) -> str:
    ((value,),) = _query(postgres, f"SHOW {name}")
    return str(value)


def _accepts_connections(port: int) -> bool:
    try:
        psycopg2.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="dagster", connect_timeout=2
        ).close()
    except psycopg2.OperationalError:
        return False
    return True


def test_dagster_instance_keeps_its_runs_across_a_crash_and_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stored through dagster-postgres is read back after SIGKILL and after a clean
    restart, on the same port; stop ends the postmaster it started."""
    with PostgresServer() as postgres:
        assert _setting(postgres, "server_version").startswith("18.")
        assert _setting(postgres, "fsync") == "off"
        assert _setting(postgres, "max_connections") == str(MAX_CONNECTIONS)
        assert postgres.url == f"postgresql+psycopg2://postgres@127.0.0.1:{postgres.port}/dagster"

        for name, value in postgres.dagster_env().items():
            monkeypatch.setenv(name, value)
        home = tmp_path / "dagster_home"
        home.mkdir()
        shutil.copy(DAGSTER_YAML, home / "dagster.yaml")
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            _assert_deployment_settings(instance)
            run_id = dg.materialize([orders], instance=instance).run_id

            port, crashed_pid = postgres.port, postgres.pid
            postgres.kill()
            assert not _accepts_connections(port)
            postgres.start()
            assert (postgres.port, postgres.pid != crashed_pid) == (port, True)
            run = instance.get_run_by_id(run_id)
            assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS

            postgres.restart()
            assert postgres.port == port
            assert instance.get_latest_materialization_event(orders.key) is not None
            assert [record.dagster_run.run_id for record in instance.get_run_records()] == [run_id]
        finally:
            instance.dispose()

        pid = postgres.pid
        assert pid is not None
        postgres.stop()
        assert postgres.pid is None
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not _accepts_connections(port)
    assert not postgres.folder.exists()


def _sessions(postgres: PostgresServer) -> int:
    """Sessions ever opened to the instance's database (PostgreSQL's statistics, which a
    session adds itself to by the time it ends), not counting the one reading them."""
    ((sessions,),) = _query(
        postgres, "SELECT sessions FROM pg_stat_database WHERE datname = 'dagster'"
    )
    return int(sessions)


def _settled_sessions(postgres: PostgresServer) -> int:
    """`_sessions` once the count stops moving (an ended session is counted when its server
    process exits, a moment after the client closed it)."""
    last = _sessions(postgres)
    while True:
        time.sleep(0.5)
        now = _sessions(postgres) - 1  # the reading before this one
        if now == last:
            return now
        last = now


def test_the_deployment_instance_keeps_its_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hundred reads and writes of the deployment's instance (deploy/dagster.yaml) open a
    few sessions, not one each; a forked child opens its own instead of using its parent's."""
    with PostgresServer() as postgres:
        for name, value in postgres.dagster_env().items():
            monkeypatch.setenv(name, value)
        home = tmp_path / "dagster_home"
        home.mkdir()
        shutil.copy(DAGSTER_YAML, home / "dagster.yaml")
        instance = dg.DagsterInstance.from_config(str(home))
        try:
            run_id = dg.materialize([orders], instance=instance).run_id
            before = _settled_sessions(postgres)
            for _ in range(50):
                instance.report_runless_asset_event(dg.AssetMaterialization(orders.key))
                assert instance.get_run_by_id(run_id) is not None
            opened = _settled_sessions(postgres) - before
            assert opened <= 2 * KEPT_CONNECTIONS, f"{opened} sessions for 100 reads and writes"
        finally:
            instance.dispose()
        _assert_a_fork_opens_its_own(postgres)


def _backend(engine: object) -> int:
    import sqlalchemy

    assert isinstance(engine, sqlalchemy.engine.Engine)
    with engine.connect() as connection:
        return int(connection.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())


def _assert_a_fork_opens_its_own(postgres: PostgresServer) -> None:
    """The child reads over a connection of its own; the parent's stays open and usable."""
    engine = kept_engine(postgres.url)
    parent_backend = _backend(engine)
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report its backend, then leave without Python's exit
        try:
            os.write(writer, str(_backend(engine)).encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        child_backend = int(pipe.read() or "0")
    os.waitpid(child, 0)
    assert child_backend not in (0, parent_backend)
    assert _backend(engine) == parent_backend  # the newest kept connection is used first
    deadline = time.monotonic() + 10  # the child's server process ends a moment after it
    while _alive(postgres, child_backend):
        assert time.monotonic() < deadline, "the child's connection outlived it"
        time.sleep(0.1)


def _alive(postgres: PostgresServer, backend: int) -> bool:
    return bool(_query(postgres, "SELECT pid FROM pg_stat_activity WHERE pid = %s", backend))


def _assert_deployment_settings(instance: dg.DagsterInstance) -> None:
    """What deploy/dagster.yaml promises (docs/production.md), as Dagster read it:
    the run queue with a slot silver runs cannot take, pools of one run, run monitoring, and
    run retries that skip step failures."""
    assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
    concurrency = instance.get_concurrency_config()
    queue = concurrency.run_queue_config
    assert queue is not None
    silver_limits = [
        limit["limit"]
        for limit in queue.tag_concurrency_limits
        if (limit["key"], limit.get("value")) == (QUEUE_TAG, SILVER_QUEUE)
    ]
    assert silver_limits and queue.max_concurrent_runs > max(silver_limits)
    assert concurrency.pool_config.default_pool_limit == 1
    assert instance.run_monitoring_enabled
    assert (instance.run_retries_enabled, instance.run_retries_max_retries) == (True, 2)
    assert not instance.run_retries_retry_on_asset_or_op_failure


def test_a_server_that_cannot_bind_its_port_fails_with_its_log() -> None:
    """When the port is taken, start raises with the server's own reason from its log."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))  # bound, not listening: a probe is refused at once
        postgres = PostgresServer()
        postgres.port = taken.getsockname()[1]
        try:
            with pytest.raises(PostgresServerError, match="Address already in use") as error:
                postgres.start()
            assert f"127.0.0.1:{postgres.port} exited" in str(error.value)
            assert postgres.pid is None
        finally:
            postgres.cleanup()
