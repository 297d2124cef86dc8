"""The processes of a deployment, as `Service`s: one builder of each command line (the warm
engine, the run worker, a code server, the daemon, a webserver), used by the demo's deployment
(`cdf_platform.demo.deployment`) and by the test kit's (`cdf_platform_testkit`).

Example:
    >>> service = daemon(Path("/tmp/logs"), Path.cwd(), Path("/tmp/workspace.yaml"))
    >>> service.command[1:]
    ['run', '-w', '/tmp/workspace.yaml']
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from cdf_platform.services.service import Service

# The console scripts of the environment this process runs in.
BIN = Path(sys.executable).parent


def engine_command(
    driver_memory: str, *, master: str | None = None, conf: Mapping[str, str] | None = None
) -> list[str]:
    """`cdf-platform engine` (a Spark Connect server with Delta) on `master` (the command's
    default when None), with `driver_memory` and Spark `conf`."""
    command = [str(BIN / "cdf-platform"), "engine"]
    if master is not None:
        command += ["--master", master]
    command += ["--driver-memory", driver_memory]
    for key, value in (conf or {}).items():
        command += ["--conf", f"{key}={value}"]
    return command


def run_worker_command(address: str | None = None) -> list[str]:
    """`cdf-platform run-worker` on `address` (None: the one $CDF_RUN_WORKER names)."""
    command = [str(BIN / "cdf-platform"), "run-worker"]
    return [*command, "--address", address] if address is not None else command


def engine(
    logs: Path,
    cwd: Path,
    driver_memory: str,
    *,
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
) -> Service:
    """The warm engine (`engine_command`), its log `engine.log` in `logs`."""
    command = engine_command(driver_memory, master=master, conf=conf)
    return Service("engine", command, logs / "engine.log", cwd=cwd)


def run_worker(logs: Path, cwd: Path, address: str | None = None) -> Service:
    """The run worker (`run_worker_command`), its log `run_worker.log` in `logs`."""
    return Service("run worker", run_worker_command(address), logs / "run_worker.log", cwd=cwd)


def code_server(logs: Path, cwd: Path, *, port: int, location: str, code: Sequence[str]) -> Service:
    """`dagster code-server start` of `code` (`-m <module>`, say) as code location `location`
    on loopback `port`, its log `code_server.log` in `logs`."""
    command = [str(BIN / "dagster"), "code-server", "start", *code]
    command += ["--location-name", location, "--host", "127.0.0.1", "--port", str(port)]
    return Service("code server", command, logs / "code_server.log", cwd=cwd)


def daemon(logs: Path, cwd: Path, workspace: Path) -> Service:
    """`dagster-daemon run` on `workspace`, its log `daemon.log` in `logs`."""
    command = [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)]
    return Service("daemon", command, logs / "daemon.log", cwd=cwd)


def webserver(
    name: str, logs: Path, cwd: Path, *, workspace: Path, port: int, flags: Sequence[str] = ()
) -> Service:
    """`dagster-webserver` on `workspace` at loopback `port` (with `flags`, `--read-only` say),
    its log `<name>.log` (spaces as underscores) in `logs`."""
    command = [str(BIN / "dagster-webserver"), "-w", str(workspace), "-h", "127.0.0.1", "-p"]
    log = logs / f"{name.replace(' ', '_')}.log"
    return Service(name, [*command, str(port), *flags], log, cwd=cwd)
