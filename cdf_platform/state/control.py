"""The control table: one state row per pipeline and one load-log row per run (two Delta tables
under one control root), and, once a pipeline names a table by its catalog name, the location
each name was found at (a third table, `table_locations`). Consumer assets of the watermark IO
manager register which tables they read (`consumers`), so maintenance counts their watermarks.
Every maintenance action a run asks for is recorded in `maintenance_log` (who, what, what it
destroyed). The load log's row and the stages its timestamps mark: `cdf_platform.state.load_log`
(`LoadLogEntry` is imported from here too).

The state mirrors the watermark that silver's own log holds; when they differ (a crash between
the MERGE and the control write) it is repaired from silver. Reads and writes are JVM-free
(`deltalake`): a control write is a few milliseconds instead of a Spark job, and status, no-op
runs and incidents found by the plan never start a JVM.

Example:
    >>> control = ControlTable("/lake/_control")
    >>> control.read_states()  # doctest: +SKIP
    {'orders': {'pipeline_id': 'orders', 'last_commit_version': 57, ...}}
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.arrow_rows import arrow_table
from cdf_platform.state.load_log import LOG_SCHEMA, LoadLogEntry
from cdf_platform.state.row_tables import RowTables, rows_of, sql_text

# Column -> Delta type name (the names of the Delta protocol's schema serialization).
STATE_SCHEMA: dict[str, str] = {
    "pipeline_id": "string",
    "source": "string",
    "target": "string",
    "source_table_id": "string",
    "generation": "integer",
    "last_commit_version": "long",
    "last_success_at": "timestamp",
    "last_mode": "string",
    "status": "string",
    "delete_mode": "string",
    "fallback_mode": "string",
    "max_allowed_lag_hours": "double",
    "min_headroom_hours": "double",
    "updated_at": "timestamp",
    # The spec silver was last written under (a mirror of silver's commit metadata).
    "spec_fingerprint": "string",
    "spec_record": "string",
}
# Where a catalog table name was found, recorded by the run that asked Spark's catalog.
LOCATION_SCHEMA: dict[str, str] = {
    "name": "string",
    "location": "string",
    "table_id": "string",
    "located_by": "string",
    "located_at": "timestamp",
}
# Which table a consumer asset of the watermark IO manager reads for one of its inputs (its
# watermarks live in its own table's log): what a VACUUM of the input must not cut.
CONSUMER_SCHEMA: dict[str, str] = {
    "registration": "string",
    "consumer": "string",
    "consumer_table": "string",
    "input_id": "string",
    "input_table": "string",
    "registered_at": "timestamp",
}
# One row per maintenance action a run asked for (each VACUUM, each refusal, each rebuild that
# overrode FAIL_FAST): who (run, job, tags), what, and what it destroyed. Append only.
MAINTENANCE_SCHEMA: dict[str, str] = {
    "recorded_at": "timestamp",
    "run_id": "string",
    "job": "string",
    # The run's tags as a JSON object (who launched it: the UI's user tag, a schedule, a sensor).
    "tags": "string",
    "table_location": "string",
    "action": "string",
    "outcome": "string",
    "destructive": "boolean",
    # The deployment's permission that let a destructive action run (None: not needed).
    "permitted_by": "string",
    "reason": "string",
    "destroyed": "string",  # What the action destroyed, in words (None: nothing).
    # The consumers whose replay window the action cut, as a JSON list.
    "windows_cut": "string",
    "files_deleted": "long",
    "latest_version": "long",
}
# A run that holds its control writes (`ControlTable.holding_writes`) writes them once one of
# them is this old, at its next control write, so other processes (status, the sensors, the
# UI) see a long run's rows within about this much of each write, not only at its end.
HELD_AT_MOST_S = 5.0


def _read_back(schema: Mapping[str, str], held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows held (a copy taken under the lock) as a read of their table returns them (the
    Python values of `schema`'s Arrow types)."""
    return rows_of(arrow_table(schema, held)) if held else []


def _log_order(row: Mapping[str, Any]) -> tuple[datetime, str]:
    started = row.get("started_at") or datetime.min.replace(tzinfo=UTC)
    return started, str(row.get("run_id") or "")


class ControlTable:
    """The platform's control tables under `root` (`pipeline_state/` and `load_log/`; the
    others once first written), and the object-store options of the lake they keep
    (`storage`): what every reader of the lake's tables that is handed the control table opens
    them with (the plan, the run, `status`, the checks and sensors).

    The object opens each table once and reads and writes its latest version, a query's rows
    read again only when the table has a newer one (`cdf_platform.state.row_tables`).

    A Dagster run holds its state and load-log rows in its object (`holding_writes`; the
    run's steps share one, `orchestration.shared.resources.LakeLayout`) and writes them
    together: one append and one upsert for all the pipelines whose steps ran in the last
    `HELD_AT_MOST_S` seconds, instead of two commits per pipeline. The object's reads see the
    rows it holds; a process that dies holding rows leaves silver's commits without their
    rows, which the next run of each pipeline repairs from silver's log
    (`run.record.repair_control`), as after a kill between the MERGE and the control write.

    Args:
        root: The control tables' folder.
        storage: The lake's object-store options, resolved (default: none, the environment's
            settings alone).
    """

    def __init__(self, root: str, storage: StorageConfig = ENVIRONMENT_ONLY) -> None:
        self.root = root.rstrip("/")
        self.storage = storage
        # Held around the tables' use (a deltalake table object is not for two threads at
        # once) and around the rows held.
        self._lock = threading.RLock()
        self._tables = RowTables(storage, self._lock)
        self._ensured = False  # both tables known to exist (`ensure`)
        # Writes held (`hold_writes`): how many hold them, the load-log rows, the state rows by
        # pipeline, and when the oldest was held (time.monotonic()).
        self._holders = 0
        self._held_log: list[dict[str, Any]] = []
        self._held_states: dict[str, dict[str, Any]] = {}
        self._held_since: float | None = None

    @property
    def state_path(self) -> str:
        """The pipeline state table."""
        return f"{self.root}/pipeline_state"

    @property
    def log_path(self) -> str:
        """The load log table."""
        return f"{self.root}/load_log"

    @property
    def locations_path(self) -> str:
        """The catalog-name locations table (created by the first run that locates a name)."""
        return f"{self.root}/table_locations"

    def ensure(self) -> None:
        """Create both tables if missing (looked for once per object)."""
        if self._ensured:
            return
        for path, schema in ((self.state_path, STATE_SCHEMA), (self.log_path, LOG_SCHEMA)):
            self._tables.create_missing(path, schema)
        self._ensured = True

    def upsert_state(self, state: Mapping[str, Any]) -> None:
        """Insert or replace the state row of `state["pipeline_id"]` (held while this object
        holds its writes)."""
        row = {**state, "updated_at": datetime.now(UTC)}
        if self._hold(lambda: self._held_states.__setitem__(str(state["pipeline_id"]), row)):
            return
        self._write_states([row])

    def _write_states(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert or replace the state rows `rows` (one per pipeline) in one commit."""
        self.ensure()
        keys = ", ".join(sql_text(str(row["pipeline_id"])) for row in rows)
        self._tables.upsert(
            self.state_path,
            STATE_SCHEMA,
            arrow_table(STATE_SCHEMA, rows),
            predicate=f"pipeline_id IN ({keys})",
        )

    def record_location(
        self, name: str, location: str, table_id: str | None, *, located_by: str
    ) -> None:
        """Record (or replace) where the catalog name `name` was found."""
        row = arrow_table(
            LOCATION_SCHEMA,
            [
                {
                    "name": name,
                    "location": location,
                    "table_id": table_id,
                    "located_by": located_by,
                    "located_at": datetime.now(UTC),
                }
            ],
        )
        self._tables.upsert(
            self.locations_path, LOCATION_SCHEMA, row, predicate=f"name = {sql_text(name)}"
        )

    def read_locations(self) -> dict[str, dict[str, Any]]:
        """Every recorded catalog name's row, by name, JVM-free."""
        rows = self.query(self.locations_path, "SELECT * FROM t")
        return {str(row["name"]): row for row in rows}

    @property
    def consumers_path(self) -> str:
        """The consumer registry (created by the first consumer asset's write)."""
        return f"{self.root}/consumers"

    def record_consumer(
        self, consumer: str, consumer_table: str, input_id: str, input_table: str
    ) -> None:
        """Record (or replace) that `consumer`, writing `consumer_table`, reads `input_table` as
        its input `input_id`."""
        row = {
            "registration": f"{consumer} <- {input_id}",
            "consumer": consumer,
            "consumer_table": consumer_table,
            "input_id": input_id,
            "input_table": input_table,
            "registered_at": datetime.now(UTC),
        }
        self._tables.upsert(
            self.consumers_path,
            CONSUMER_SCHEMA,
            arrow_table(CONSUMER_SCHEMA, [row]),
            predicate=f"registration = {sql_text(str(row['registration']))}",
        )

    def read_consumers(self, input_table: str | None = None) -> list[dict[str, Any]]:
        """Registered consumer inputs (of one input table's location, if given), JVM-free."""
        rows = self.query(self.consumers_path, "SELECT * FROM t ORDER BY registration")
        wanted = input_table.rstrip("/") if input_table is not None else None
        return [r for r in rows if wanted is None or str(r["input_table"]).rstrip("/") == wanted]

    @property
    def maintenance_path(self) -> str:
        """The maintenance log (created by the first maintenance action recorded)."""
        return f"{self.root}/maintenance_log"

    def append_maintenance(self, row: Mapping[str, Any]) -> None:
        """Append one maintenance-log row (`MAINTENANCE_SCHEMA`'s columns; `recorded_at` is
        now). A blind append: never conflicts."""
        self.append_row(
            self.maintenance_path, MAINTENANCE_SCHEMA, {**row, "recorded_at": datetime.now(UTC)}
        )

    def append_row(self, path: str, schema: Mapping[str, str], row: Mapping[str, Any]) -> None:
        """Append `row` to the append-only control table at `path` (created with `schema` when
        missing; a table written before a column was added takes it). Never conflicts."""
        self._tables.append(path, schema, [row])

    def read_maintenance_log(self, table_location: str | None = None) -> list[dict[str, Any]]:
        """Maintenance-log rows (oldest first), optionally of one table, JVM-free."""
        rows = self.query(self.maintenance_path, "SELECT * FROM t ORDER BY recorded_at")
        wanted = table_location.rstrip("/") if table_location is not None else None
        return [r for r in rows if wanted is None or str(r["table_location"]).rstrip("/") == wanted]

    def append_log(self, entry: LoadLogEntry, *, state_follows: bool = False) -> None:
        """Append one load-log row (a blind append: never conflicts; held while this object
        holds its writes). `state_follows`: the pipeline's state row comes next
        (`upsert_state`); held rows that are due wait for it, so that a run's process dying
        between two writes of held rows never leaves the row written without its state."""
        row = entry.as_row()
        if self._hold(lambda: self._held_log.append(row), may_write=not state_follows):
            return
        self.ensure()
        self.append_row(self.log_path, LOG_SCHEMA, row)

    # -- writes held by a run -----------------------------------------------------------------

    def hold_writes(self) -> None:
        """Hold this object's state and load-log writes from now until `release_writes`
        (calls nest): `upsert_state` and `append_log` keep their rows, this object's reads see
        them, and they are written together once one is `HELD_AT_MOST_S` old (at the next
        write) and when the last holder releases them."""
        with self._lock:
            self._holders += 1

    def release_writes(self) -> None:
        """End one `hold_writes`; the last one writes the rows held.

        Raises:
            StorageUnreachable: the rows could not be written (they stay held for a later
                `write_held`, and for the next run's repair if the process ends first).
        """
        with self._lock:
            if self._holders == 0:
                return
            self._holders -= 1
            if self._holders == 0:
                self.write_held()

    @contextlib.contextmanager
    def holding_writes(self) -> Iterator[None]:
        """`hold_writes` for the block, the rows written at its end."""
        self.hold_writes()
        try:
            yield
        finally:
            self.release_writes()

    def _hold(self, keep: Callable[[], None], *, may_write: bool = True) -> bool:
        """Keep a row (`keep` adds it to the rows held) when this object holds its writes;
        write the rows held once the oldest is `HELD_AT_MOST_S` old (unless not `may_write`:
        a row that belongs with the next one). False: not held.

        The tables are created first when missing, so a control root that cannot be written
        fails the write that would have written there, not the end of the run."""
        with self._lock:
            if self._holders == 0:
                return False
            self.ensure()
            keep()
            now = time.monotonic()
            self._held_since = self._held_since if self._held_since is not None else now
            if may_write and now - self._held_since >= HELD_AT_MOST_S:
                self.write_held()
            return True

    def write_held(self) -> None:
        """Write the rows held now: the load-log rows in one append, then the state rows in
        one upsert. Rows a failed write did not write stay held."""
        with self._lock:
            if self._held_log:
                self._tables.append(self.log_path, LOG_SCHEMA, self._held_log)
                self._held_log = []
            if self._held_states:
                self._write_states(list(self._held_states.values()))
                self._held_states = {}
            self._held_since = None

    def query(self, path: str, sql: str) -> list[dict[str, Any]]:
        """The rows of `sql` over the control table at `path` (named `t`; none when it does
        not exist yet), JVM-free: read again only when the table has a version after the one
        they were read at."""
        return self._tables.query(path, sql)

    def read_states(self) -> dict[str, dict[str, Any]]:
        """Every pipeline's state row (with those this object holds), JVM-free."""
        rows = self.query(self.state_path, "SELECT * FROM t")
        with self._lock:
            states = list(self._held_states.values())
        held = _read_back(STATE_SCHEMA, states)
        return {str(row["pipeline_id"]): row for row in [*rows, *held]}

    def read_log(self, pipeline_id: str | None = None) -> list[dict[str, Any]]:
        """Load-log rows (oldest first; with those this object holds), optionally of one
        pipeline, JVM-free."""
        rows = self.query(self.log_path, "SELECT * FROM t ORDER BY started_at, run_id")
        with self._lock:
            log = list(self._held_log)
        held = _read_back(LOG_SCHEMA, log)
        if held:
            rows = sorted([*rows, *held], key=_log_order)
        # A log no run of this version appended to yet lacks the newer columns: they read null.
        return [
            {**dict.fromkeys(LOG_SCHEMA), **r}
            for r in rows
            if pipeline_id is None or r["pipeline_id"] == pipeline_id
        ]
