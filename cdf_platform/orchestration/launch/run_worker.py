"""The warm run worker: a process of the deployment that starts each Dagster run by forking
itself, with Dagster, the platform and the Spark Connect client already imported, instead of
the code server spawning a new interpreter that imports them all again (about a second of CPU
per run before it does anything, several on a busy machine).

`cdf-platform run-worker` runs it; `WarmRunLauncher` (`cdf_platform.orchestration.run_launcher`,
named in deploy/dagster.yaml) hands it the runs to start. A forked run process is what
`dagster api execute_run` would be (Dagster's own run worker entry point): it loads the run
from the instance of its `DAGSTER_HOME`, builds the definitions from the current pipelines file,
and executes the run, writing its events as any run does. Only the run id crosses the socket:
the worker runs what the instance holds, in the code location it was started for.

The worker answers on a TCP address (loopback by default), one JSON request per line:
`{"op": "launch", "run_id": ...}` (`{"pid", "started", "host"}` back: the run process's pid,
start time and machine), `{"op": "alive", "pid", "started"}`, `{"op": "terminate", "pid",
"started"}` (SIGTERM, which Dagster turns into the run's interruption) and `{"op": "ping"}`.
A pid with its start time names one process for good, so `alive` and `terminate` stay right
across the worker's own restarts. Run processes are the worker's children, in its process
group: stopping the worker (SIGTERM) leaves them to finish; killing its group kills them, as
with a code server.

Python code changes need a restart of the worker (like the code server's); an edit of the
pipelines file does not: each run builds the definitions from the file as it is then.

Example:
    >>> serve("127.0.0.1:4010")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any

import psutil

logger = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:4010"
# A request or reply larger than this is refused (they are a few dozen bytes).
MAX_MESSAGE_BYTES = 64 * 1024
# Modules a run needs, imported once by the worker so that no run imports them again (with
# the modules of the instance's storage and launcher classes, `instance_modules`): the ones
# whose import starts no thread, or none once `QUIET_LIBRARIES` is set. A fork copies only the
# forking thread, and a lock another thread held stays locked in the child for good (a forked
# run hung opening its Spark Connect channel when the worker had imported gRPC's client).
# pyspark's Connect client starts gRPC's threads: each run imports it itself (about 0.5 s);
# `serve` refuses to fork from a process with more than one thread.
# pandas and pyarrow's bridge to it: pyarrow imports them at the first array it builds from
# Python values (a run merged without Spark builds several), 0.2-0.8 s of every such run
# otherwise.
PRELOAD = (
    "dagster",
    "dagster._cli.api",
    "cdf_platform.definitions",
    "cdf_platform.run",
    "pyarrow",
    "deltalake",
    "pandas",
    "pyarrow.pandas_compat",
    "pyarrow.vendored.version",
)
# Settings that keep a library's import from starting threads: the background purge threads of
# the jemalloc that pyarrow and deltalake each bundle, and OpenBLAS's pool (numpy's, imported
# by pyarrow; a run does no linear algebra). In the environment the worker starts with
# (`start_quiet`), which a forked run process inherits.
QUIET_LIBRARIES = {
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
    "_RJEM_MALLOC_CONF": "background_thread:false",
    "OPENBLAS_NUM_THREADS": "1",
}


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` as a (host, port) pair.

    Raises:
        ValueError: `address` is not `host:port` with a numeric port.
    """
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host, int(port)


def process_started(pid: int) -> float | None:
    """When process `pid` started (epoch seconds), or None when there is no such process."""
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def is_same_process(pid: int, started: float) -> bool:
    """Whether `pid` is still the process that started at `started` (not a reused pid), and
    runs: a zombie (ended, not yet reaped: its parent died with it) does not."""
    try:
        process = psutil.Process(pid)
        return (
            abs(float(process.create_time()) - started) < 0.01
            and process.status() != psutil.STATUS_ZOMBIE
        )
    except psutil.Error:
        return False


def request(address: str, message: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send `message` to the run worker at `address` and return its reply.

    Raises:
        OSError: nothing answers at `address`, or the connection broke.
        ValueError: the reply is not a JSON object.
    """
    host, port = parse_address(address)
    with socket.create_connection((host, port), timeout=timeout) as connection:
        connection.sendall(json.dumps(message).encode() + b"\n")
        with connection.makefile("rb") as replies:
            line = replies.readline(MAX_MESSAGE_BYTES)
    reply = json.loads(line) if line else None
    if not isinstance(reply, dict):
        raise ValueError(f"the run worker at {address} answered {line!r}")
    return reply


def answers(address: str, timeout: float = 2.0) -> bool:
    """Whether a run worker answers at `address` (a `ping` within `timeout` seconds)."""
    try:
        request(address, {"op": "ping"}, timeout=timeout)
    except (OSError, ValueError):
        return False
    return True


class RunWorker:
    """The worker's state: its listening socket, the run processes it forked, and what it
    prepares in itself before each fork (`warm`: the definitions every run loads)."""

    def __init__(self, address: str, warm: Callable[[], object] | None = None) -> None:
        self.address = address
        self.warm = warm
        self.children: dict[int, str] = {}
        host, port = parse_address(address)
        self.listener = socket.create_server((host, port), reuse_port=False)
        self.listener.setblocking(False)

    def serve_forever(self) -> None:
        """Answer requests until SIGTERM or SIGINT; run processes are left to finish."""
        stopping = False

        def stop(_signo: int, _frame: object) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        with selectors.DefaultSelector() as selector:
            selector.register(self.listener, selectors.EVENT_READ)
            while not stopping:
                self.reap()
                for _key, _events in selector.select(timeout=0.5):
                    with contextlib.suppress(BlockingIOError):
                        connection, _ = self.listener.accept()
                        with connection:
                            self.answer(connection)
        self.listener.close()
        logger.info("run worker stopped; %d run process(es) left to finish", len(self.children))

    def reap(self) -> None:
        """Collect the exit of every run process that ended."""
        while self.children:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.pop(pid, None)

    def answer(self, connection: socket.socket) -> None:
        """Read one request from `connection` and write its reply."""
        connection.setblocking(True)
        connection.settimeout(10.0)
        with connection.makefile("rb") as lines:
            line = lines.readline(MAX_MESSAGE_BYTES)
        try:
            message = json.loads(line)
            reply = self.handle(message) if isinstance(message, dict) else {"error": "not JSON"}
        except (ValueError, KeyError, TypeError) as err:
            reply = {"error": f"bad request: {err}"}
        connection.sendall(json.dumps(reply).encode() + b"\n")

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        """The reply to one request (see the module docstring)."""
        op = message.get("op")
        if op == "ping":
            return {"pong": os.getpid()}
        if op == "launch":
            run_id = str(message["run_id"])
            pid = self.fork_run(run_id)
            return {"pid": pid, "started": process_started(pid), "host": socket.gethostname()}
        pid, started = int(message["pid"]), float(message["started"])
        if op == "alive":
            return {"alive": is_same_process(pid, started)}
        if op == "terminate":
            if not is_same_process(pid, started):
                return {"signalled": False}
            os.kill(pid, signal.SIGTERM)
            return {"signalled": True}
        return {"error": f"unknown op {op!r}"}

    def fork_run(self, run_id: str) -> int:
        """Start run `run_id` in a forked child; return its pid."""
        if self.warm is not None:
            self.warm()  # builds the definitions again only when they changed (a spec edit)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid:
            self.children[pid] = run_id
            logger.info("run %s: started in process %d", run_id, pid)
            return pid
        # The child: from here on a run process; it never returns to the worker's loop.
        code = 1
        try:
            self.listener.close()
            for number in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
                signal.signal(number, signal.SIG_DFL)
            code = execute_run(run_id)
        except BaseException:  # the run process must end here, whatever happened
            logger.exception("run %s: the run process failed", run_id)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)


def execute_run(run_id: str) -> int:
    """Execute run `run_id` of the instance of `DAGSTER_HOME` in this process, as
    `dagster api execute_run` does (Dagster's run worker entry point); return its exit code.
    The instance's storage keeps its connections for the run (deploy/dagster.yaml:
    `PooledPostgresStorage`)."""
    import dagster as dg
    from dagster._cli.api import _execute_run_command_body
    from dagster._utils.interrupts import capture_interrupts, setup_interrupt_handlers

    # SIGTERM interrupts the run as SIGINT does (Dagster's run workers map it so).
    setup_interrupt_handlers()
    with capture_interrupts(), dg.DagsterInstance.get() as instance:
        return _execute_run_command_body(
            run_id, instance, lambda _event: None, set_exit_code_on_failure=True
        )


def instance_modules() -> list[str]:
    """The modules of the classes the instance of `DAGSTER_HOME` configures (its storages, run
    launcher and coordinator, compute log manager): a run opens the instance first, and their
    imports (SQLAlchemy, Alembic, each storage's dialect) cost it half a second otherwise.
    Nothing is opened or connected here. An empty list when there is no such instance."""
    home = os.environ.get("DAGSTER_HOME")
    if not home or not os.path.isdir(home):
        return []
    from dagster._core.instance.ref import InstanceRef

    ref = InstanceRef.from_dir(home)
    names = [
        getattr(data, "module_name", None)
        for data in ref
        if data is not None and not isinstance(data, dict)
    ]
    return [name for name in names if isinstance(name, str)]


def os_threads() -> int:
    """How many threads this process has (the kernel's count, native threads included)."""
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1


def quiet_environment(environ: Mapping[str, str]) -> dict[str, str] | None:
    """`environ` with `QUIET_LIBRARIES` added where it lacks them; None when it has them all
    (a value set already is kept: the operator's)."""
    missing = {key: value for key, value in QUIET_LIBRARIES.items() if key not in environ}
    return {**environ, **missing} if missing else None


def start_quiet() -> None:
    """Start this process again, the same command line, with `QUIET_LIBRARIES` in its
    environment, unless it started with them: jemalloc and OpenBLAS read them with getenv when
    their library loads, and no call of pyarrow, deltalake or numpy passes them, so they belong
    to the environment the process starts with (nothing in this process rewrites its own)."""
    if (environ := quiet_environment(os.environ)) is not None:
        os.execve(sys.executable, sys.orig_argv, environ)


def preload(warm: Callable[[], object] | None = None) -> tuple[str, ...]:
    """Import what runs need (`PRELOAD` and `instance_modules`) into a process started with
    `QUIET_LIBRARIES` (`start_quiet`), then call `warm` (the command line's: the platform's
    definitions built, which every forked run then uses); return the modules imported.

    Raises:
        RuntimeEnvironmentError: the process has threads besides its own after the imports
            (a fork would copy their locks, held, into every run).
    """
    import importlib

    from cdf_platform.core.errors import RuntimeEnvironmentError

    modules = (*PRELOAD, *instance_modules())
    for name in modules:
        importlib.import_module(name)
    if warm is not None:
        warm()
    if (threads := os_threads()) > 1:
        raise RuntimeEnvironmentError(
            f"the run worker has {threads} threads after importing {', '.join(modules)}: "
            "forking it is unsafe"
            + (
                ""
                if quiet_environment(os.environ) is None
                else f" (it started without {', '.join(sorted(QUIET_LIBRARIES))}: start_quiet)"
            ),
            action="report it; meanwhile run without the worker (CDF_RUN_WORKER empty): runs "
            "then start through the code server",
        )
    return modules


def serve(address: str = DEFAULT_ADDRESS, warm: Callable[[], object] | None = None) -> None:
    """Import what runs need and call `warm` (`preload`), then start runs on request at
    `address` until stopped, calling `warm` before each fork.

    Raises:
        RuntimeEnvironmentError: from `preload`.
    """
    start_quiet()
    preload(warm)
    worker = RunWorker(address, warm)
    logger.info("run worker listening on %s (pid %d)", address, os.getpid())
    worker.serve_forever()
