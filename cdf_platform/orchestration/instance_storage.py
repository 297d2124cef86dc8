"""The Dagster instance's storage of a deployment: dagster-postgres's, with connections kept.

dagster-postgres opens its run, event-log and schedule storages on SQLAlchemy's `NullPool`:
every read and write opens a new connection, and PostgreSQL starts a server process for it.
Writing the 200 planned events Dagster writes when it creates a shared run of 50 pipelines
took 2.23 s and 2.62 CPU s that way, 0.33 s and 0.31 CPU s over one kept connection
(`python -m bench.event_writes`). Only Dagster's webserver keeps connections
(`DagsterInstance.optimize_for_webserver`). Named in deploy/dagster.yaml
(`storage: custom:`), `PooledPostgresStorage` keeps them in every process that opens the
instance: the daemon (which creates the runs the sensors request and writes their planned
events), the code server's sensor evaluations, each run.

A process shares one engine per database among the instances it opens (the code server opens
one for each schedule evaluation), holding `KEPT_CONNECTIONS` and opening more while those are
in use, closed when given back (as `NullPool` closes every one). Before a kept connection is
used it is pinged, and opened again if the server is gone (a PostgreSQL restart costs a
reconnect, not a failed read); one opened by another process (the parent of a fork) is never
used, nor closed, by the child. The settings are dagster-postgres's own (`postgres_db` or
`postgres_url`).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

import sqlalchemy
from dagster._core.storage.config import pg_config
from dagster._serdes import ConfigurableClassData
from dagster_postgres.storage import DagsterPostgresStorage
from dagster_postgres.utils import (
    create_pg_engine,
    get_token_provider_from_config,
    pg_url_from_config,
)
from sqlalchemy import event, exc

if TYPE_CHECKING:
    from collections.abc import Mapping

    from dagster._config.config_schema import UserConfigSchema
    from dagster_postgres.auth import PgTokenProvider

# Connections a process keeps open per database between reads and writes: the daemon's sensor,
# queue and monitoring loops use the instance from threads of their own, often two at once.
KEPT_CONNECTIONS = 2
# A kept connection older than this is opened again before use (the webserver's default).
RECYCLE_SECONDS = 3600


class KeptEngines:
    """A process's engines, one per database URL, that every instance it opens shares.

    Engines are kept by (process id, database URL): a forked child finds none of its parent's
    and opens its own; the parent's stay referenced here, so the child never closes them
    (closing a connection sends PostgreSQL its end, over a socket the parent still uses).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._engines: dict[tuple[int, str], sqlalchemy.engine.Engine] = {}
        # Connections a forked child found in an engine of its parent's, kept from being closed.
        self._inherited: list[Any] = []

    def engine(
        self, postgres_url: str, token_provider: PgTokenProvider | None = None
    ) -> sqlalchemy.engine.Engine:
        """This process's engine for `postgres_url`, opened on first use."""
        key = (os.getpid(), postgres_url)
        with self._lock:
            engine = self._engines.get(key)
            if engine is None:
                engine = create_pg_engine(
                    postgres_url,
                    token_provider,
                    isolation_level="AUTOCOMMIT",
                    pool_size=KEPT_CONNECTIONS,
                    max_overflow=-1,  # no limit, as with NullPool: the extra ones are closed
                    pool_pre_ping=True,
                    pool_use_lifo=True,  # the newest first: the others idle, and few stay busy
                    pool_recycle=RECYCLE_SECONDS,
                )
                event.listen(engine, "connect", _note_process)
                event.listen(engine, "checkout", self._refuse_other_process)
                self._engines[key] = engine
            return engine

    def _refuse_other_process(self, dbapi_connection: Any, record: Any, proxy: Any) -> None:
        """A connection opened by another process (a fork's parent) is set aside, not used,
        and the pool opens a new one (SQLAlchemy retries a checkout on `DisconnectionError`)."""
        if record.info.get("pid") == os.getpid():
            return
        self._inherited.append(dbapi_connection)
        record.dbapi_connection = proxy.dbapi_connection = None
        raise exc.DisconnectionError("a connection of the parent process, opened again")


def _note_process(_dbapi_connection: Any, record: Any) -> None:
    record.info["pid"] = os.getpid()


# The engines of this process (a forked child's: those it opens after the fork).
_PROCESS = KeptEngines()


def kept_engine(
    postgres_url: str, token_provider: PgTokenProvider | None = None
) -> sqlalchemy.engine.Engine:
    """This process's engine for `postgres_url`, opened on first use (`KeptEngines.engine`).

    Example:
        >>> engine = kept_engine("postgresql+psycopg2://user@127.0.0.1:1/dagster")
        >>> kept_engine("postgresql+psycopg2://user@127.0.0.1:1/dagster") is engine
        True
        >>> type(engine.pool).__name__, engine.pool.size()
        ('QueuePool', 2)
    """
    return _PROCESS.engine(postgres_url, token_provider)


class PooledPostgresStorage(DagsterPostgresStorage):
    """dagster-postgres's storage whose run, event-log and schedule storages read and write
    over this process's kept connections (`kept_engine`).

    `dagster.yaml`:

        storage:
          custom:
            module: cdf_platform.orchestration.instance_storage
            class: PooledPostgresStorage
            config:
              postgres_db: {...}   # as under `storage: postgres:`
    """

    def __init__(
        self,
        postgres_url: str,
        should_autocreate_tables: bool = True,
        inst_data: ConfigurableClassData | None = None,
        token_provider: PgTokenProvider | None = None,
    ) -> None:
        super().__init__(postgres_url, should_autocreate_tables, inst_data, token_provider)
        engine = kept_engine(postgres_url, token_provider)
        for storage in (self._run_storage, self._event_log_storage, self._schedule_storage):
            storage._engine = engine  # what optimize_for_webserver replaces, too

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return pg_config()

    @classmethod
    def from_config_value(
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> PooledPostgresStorage:
        return PooledPostgresStorage(
            inst_data=inst_data,
            postgres_url=pg_url_from_config(config_value),
            should_autocreate_tables=config_value.get("should_autocreate_tables", True),
            token_provider=get_token_provider_from_config(config_value),
        )
