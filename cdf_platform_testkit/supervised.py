"""The test kit's deployment (`Deployment`: PostgreSQL, the lake, the pipelines file, the
environment, the waits) started as production starts it: one `cdf-platform serve`, supervisord
on the repository's `deploy/supervisord.conf` running the engine, the run worker, the code
server, the webserver and the daemon. The processes are found, killed and seen back through
supervisord's XML-RPC API on its unix socket, as `supervisorctl` does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import xmlrpc.client
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil
from supervisor.xmlrpc import SupervisorTransport

from cdf_platform.core.config import RUN_WORKER_ENV
from cdf_platform.orchestration.launch.run_worker import answers
from cdf_platform.services.deployment_processes import BIN
from cdf_platform.services.service import Service, wait_for
from cdf_platform.spark.runtime.engine import DEFAULT_ENGINE_MEMORY
from cdf_platform.supervised import (
    ENGINE_MEMORY_ENV,
    SUPERVISOR_FOLDER,
    WEBSERVER_PORT_ENV,
)
from cdf_platform_testkit.deployment import PROJECT_ROOT, START_TIMEOUT_S, Deployment
from cdf_platform_testkit.postgres import PostgresServer

# deploy/supervisord.conf's programs.
ENGINE, RUN_WORKER, CODE_SERVER, WEBSERVER, DAEMON = (
    "engine",
    "run-worker",
    "code-server",
    "webserver",
    "daemon",
)
PROGRAMS = (ENGINE, RUN_WORKER, CODE_SERVER, WEBSERVER, DAEMON)
# supervisord stops every program (the code server's SIGKILL comes after 3 s) then exits.
STOP_TIMEOUT_S = 60.0


class SupervisedDeployment(Deployment):
    """`Deployment`'s lake, instance and environment, its five processes run by supervisord
    (`cdf-platform serve`); `services` is supervisord alone, and each process's log (`tail`)
    is the one supervisord writes under `$DAGSTER_HOME/supervisor`.

    Example:
        >>> with deployment.environment():  # doctest: +SKIP
        ...     deployment.start()
        ...     old = deployment.kill(ENGINE)  # SIGKILL of its process group
        ...     deployment.wait_back(ENGINE, old)
    """

    def __init__(
        self,
        root: Path,
        postgres: PostgresServer,
        pipelines: list[dict[str, Any]],
        *,
        engine_memory: str = DEFAULT_ENGINE_MEMORY,
        env: Mapping[str, str | None] | None = None,
        sections: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(
            root, postgres, pipelines, engine_memory=engine_memory, env=env, sections=sections
        )
        self.env |= {
            ENGINE_MEMORY_ENV: engine_memory,
            WEBSERVER_PORT_ENV: str(self.webserver_port),
        }
        self.folder = self.home / SUPERVISOR_FOLDER
        for program, service in self._programs().items():
            service.log = self.folder / f"{program}.log"
        self.supervisord = Service(
            "supervisord",
            [str(BIN / "cdf-platform"), "serve"],
            root / "logs" / "supervisord.log",
            cwd=PROJECT_ROOT,
        )

    def _programs(self) -> dict[str, Service]:
        return {
            ENGINE: self.engine,
            RUN_WORKER: self.run_worker,
            CODE_SERVER: self.code_server,
            WEBSERVER: self.webserver,
            DAEMON: self.daemon,
        }

    @property
    def services(self) -> list[Service]:
        return [self.supervisord]

    def supervisor(self) -> Any:
        """supervisord's XML-RPC API (`supervisor.getProcessInfo(name)`, ...), on its unix
        socket."""
        transport = SupervisorTransport(None, None, f"unix://{self.folder / 'supervisor.sock'}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def pid(self, program: str) -> int | None:
        """The pid of `program` while supervisord has it RUNNING (it leads its process group);
        None otherwise (starting, backing off, exited)."""
        try:
            info = self.supervisor().supervisor.getProcessInfo(program)
        except (OSError, xmlrpc.client.Fault):  # supervisord not listening yet
            return None
        return int(info["pid"]) if info["statename"] == "RUNNING" else None

    def answers(self) -> dict[str, Callable[[], bool]]:
        """Whether each program answers (as `Deployment` waits for it); the daemon's: its
        sensor daemon beat after the program's current process started."""
        return {
            ENGINE: self._engine_answers,
            RUN_WORKER: lambda: answers(str(self.env[RUN_WORKER_ENV])),
            CODE_SERVER: self._code_server_answers,
            WEBSERVER: lambda: self._webserver_answers(self.webserver_port),
            DAEMON: lambda: self._daemon_beating(self._started(DAEMON)),
        }

    def _started(self, program: str) -> float:
        """When `program`'s current process started (supervisord's `start`, a timestamp)."""
        return float(self.supervisor().supervisor.getProcessInfo(program)["start"])

    def start(self) -> None:
        """`cdf-platform serve`; wait until every program is RUNNING and answers."""
        self.supervisord.start(self.env)
        for program, ready in self.answers().items():
            self.supervisord.wait_until(
                lambda program=program, ready=ready: self.pid(program) is not None and ready(),
                START_TIMEOUT_S,
            )

    def kill(self, program: str) -> int:
        """SIGKILL of `program`'s process group (a crash: a JVM's or a server's children die
        with it); returns the pid killed."""
        pid = wait_for(f"{program} running", lambda: self.pid(program), START_TIMEOUT_S, 0.2)
        os.killpg(pid, signal.SIGKILL)
        return pid

    def wait_back(self, program: str, killed: int) -> int:
        """Wait until supervisord runs `program` again, in a process other than `killed`, and
        it answers; returns the new pid."""
        ready = self.answers()[program]

        def back() -> int | None:
            pid = self.pid(program)
            return pid if pid not in (None, killed) and ready() else None

        return wait_for(f"{program} back after its kill", back, START_TIMEOUT_S, 0.5)

    def stop(self) -> None:
        """Stop supervisord by its PID (SIGTERM: it stops every program, then exits)."""
        self.supervisord.stop(STOP_TIMEOUT_S)

    def stop_and_wait_gone(self, timeout: float = STOP_TIMEOUT_S) -> list[psutil.Process]:
        """Stop supervisord by its PID; return what is left, of every process it and its
        programs had (their descendants too), `timeout` seconds after it exited (none when the
        deployment stops cleanly)."""
        processes = self.processes()
        self.stop()
        deadline = time.monotonic() + timeout
        while (left := _alive(processes)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left


def _alive(processes: Sequence[psutil.Process]) -> list[psutil.Process]:
    left = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                left.append(process)
    return left
