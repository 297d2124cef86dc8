"""The production deployment on one machine, supervised: `cdf-platform serve` checks the
environment docs/production.md gives every process, then runs supervisord in the foreground
on `deploy/supervisord.conf`, which starts the warm engine, the run worker, the code server,
the webserver and the daemon and restarts any that exits.

Example:
    >>> env = supervisord_environment({**EXAMPLE_ENV, "PATH": "/usr/bin"})
    >>> env["CDF_WEBSERVER_PORT"], env["CDF_ENGINE_MEMORY"]
    ('3000', '4g')
    >>> try:
    ...     supervisord_environment({"DAGSTER_HOME": "/srv/dagster"})
    ... except RuntimeEnvironmentError as err:
    ...     print(err)
    RuntimeEnvironmentError: the deployment's environment lacks CDF_DAGSTER_PG_HOST (the
    instance's PostgreSQL host), ... What to do: export each (docs/production.md lists them),
    then run `cdf-platform serve` again.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from cdf_platform.core.config import (
    LAKE_ROOT_ENV,
    PIPELINES_FILE_ENV,
    REMOTE_ENV,
    RUN_WORKER_ENV,
)
from cdf_platform.core.errors import RuntimeEnvironmentError

# What each process of the deployment reads, and what it is (docs/production.md). An empty
# value counts as set: the instance's password may be empty, and an empty CDF_RUN_WORKER sends
# every run through the code server.
REQUIRED_ENV = {
    "DAGSTER_HOME": "the Dagster instance's folder, holding a copy of deploy/dagster.yaml",
    "CDF_DAGSTER_PG_HOST": "the instance's PostgreSQL host",
    "CDF_DAGSTER_PG_PORT": "its port",
    "CDF_DAGSTER_PG_USER": "its user",
    "CDF_DAGSTER_PG_PASSWORD": "its password",
    "CDF_DAGSTER_PG_DB": "its database",
    LAKE_ROOT_ENV: "the lake root",
    PIPELINES_FILE_ENV: "the pipelines file",
    "CDF_CODE_SERVER_HOST": "the code server's loopback host",
    "CDF_CODE_SERVER_PORT": "the code server's port",
    REMOTE_ENV: "the warm engine's Spark Connect URL",
    RUN_WORKER_ENV: "the warm run worker's host:port",
}
# What `deploy/supervisord.conf` reads beyond them, and its value when unset.
ENGINE_MEMORY_ENV = "CDF_ENGINE_MEMORY"
WEBSERVER_PORT_ENV = "CDF_WEBSERVER_PORT"
DEFAULTS = {ENGINE_MEMORY_ENV: "4g", WEBSERVER_PORT_ENV: "3000"}
# The repository's configuration (a checkout, where deploy/ is).
SUPERVISORD_CONF = Path(__file__).resolve().parents[1] / "deploy" / "supervisord.conf"
# Where deploy/supervisord.conf keeps its files, under $DAGSTER_HOME.
SUPERVISOR_FOLDER = "supervisor"
# A full environment, for examples and tests.
EXAMPLE_ENV = {
    "DAGSTER_HOME": "/srv/dagster",
    "CDF_DAGSTER_PG_HOST": "db.internal",
    "CDF_DAGSTER_PG_PORT": "5432",
    "CDF_DAGSTER_PG_USER": "dagster",
    "CDF_DAGSTER_PG_PASSWORD": "",
    "CDF_DAGSTER_PG_DB": "dagster",
    LAKE_ROOT_ENV: "s3://lake",
    PIPELINES_FILE_ENV: "/srv/cdf/pipelines.yaml",
    "CDF_CODE_SERVER_HOST": "127.0.0.1",
    "CDF_CODE_SERVER_PORT": "4000",
    REMOTE_ENV: "sc://127.0.0.1:15002",
    RUN_WORKER_ENV: "127.0.0.1:4010",
}


def supervisord_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` as supervisord gets it: every variable of `REQUIRED_ENV` checked, `DEFAULTS`
    filled in, and this Python's scripts first on PATH (the processes are this environment's
    `cdf-platform`, `dagster`, ...), whether or not its virtualenv is activated.

    Raises:
        RuntimeEnvironmentError: a variable of `REQUIRED_ENV` is unset (the message names each).
    """
    missing = [name for name in REQUIRED_ENV if name not in environ]
    if missing:
        raise RuntimeEnvironmentError(
            "the deployment's environment lacks "
            + ", ".join(f"{name} ({REQUIRED_ENV[name]})" for name in missing),
            action="export each (docs/production.md lists them), then run `cdf-platform serve` "
            "again",
        )
    scripts = str(Path(sys.executable).parent)
    path = os.pathsep.join(filter(None, [scripts, environ.get("PATH")]))
    return {**DEFAULTS, **environ, "PATH": path}


def supervisor_folder(environ: Mapping[str, str]) -> Path:
    """Where supervisord keeps its log, each process's log and its control socket:
    `$DAGSTER_HOME/supervisor`."""
    return Path(environ["DAGSTER_HOME"]) / SUPERVISOR_FOLDER


def supervisord_command(config: Path) -> list[str]:
    """supervisord (this environment's) on `config`, in the foreground."""
    return [str(Path(sys.executable).parent / "supervisord"), "--configuration", str(config)]


def prepare(environ: Mapping[str, str], config: Path) -> None:
    """Check what supervisord and the processes need on disk before they start: `config`, the
    instance's `dagster.yaml` and the pipelines file; make the supervisor folder.

    Raises:
        RuntimeEnvironmentError: one of them is missing (the message names it).
    """
    home = Path(environ["DAGSTER_HOME"])
    needed = [
        (config, "pass --config, or run from a checkout (deploy/supervisord.conf)"),
        (home / "dagster.yaml", f"copy deploy/dagster.yaml to {home / 'dagster.yaml'}"),
        (
            Path(environ[PIPELINES_FILE_ENV]),
            f"write the pipelines file, or point {PIPELINES_FILE_ENV} at it",
        ),
    ]
    for path, action in needed:
        if not path.is_file():
            raise RuntimeEnvironmentError(f"{path} is not a file", action=action)
    supervisor_folder(environ).mkdir(parents=True, exist_ok=True)


def serve(config: Path = SUPERVISORD_CONF) -> None:
    """Become supervisord on `config` with the checked environment (one PID to watch and to
    stop: SIGTERM stops every process, the daemon first, then exits).

    Raises:
        RuntimeEnvironmentError: see `supervisord_environment` and `prepare`.
    """
    environ = supervisord_environment(os.environ)
    prepare(environ, config)
    command = supervisord_command(config)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, environ)
