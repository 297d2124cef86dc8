"""The small Delta tables of rows that the control root holds, read and written JVM-free
(`deltalake`): how `ControlTable` keeps each of them (`cdf_platform.state.control` says what
they hold).

Each table is opened once and brought to its latest version at each use, reading only the
commits since (a shared run writes the state table and the load log for each of its pipelines:
opening them afresh replays up to a checkpoint interval of commits each time); a query's rows
are read again only when the table has a newer version. A write that loses to a concurrent
commit is tried again from the latest version, and a table of many small files is compacted
by the write that finds them.

Example:
    >>> import threading
    >>> from cdf_platform.core.storage import ENVIRONMENT_ONLY
    >>> tables = RowTables(ENVIRONMENT_ONLY, threading.RLock())
    >>> tables.query("/no/such/lake/_control/consumers", "SELECT * FROM t")  # none yet
    []
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cdf_platform.core.errors import ConcurrentWriteConflict
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.arrow_rows import arrow_table, delta_schema
from cdf_platform.deltalog.delta_tables import (
    create_delta_table,
    open_delta_table,
    refresh_delta_table,
    write_opened_table,
)
from cdf_platform.deltalog.tables import is_delta_table

if TYPE_CHECKING:
    from deltalake import DeltaTable

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Runs of different pipelines write the same tables: deltalake retries a losing append; a row
# replaced in a file another rewrote raises CommitFailedError, retried here from the latest
# version.
RETRIES = 8
# Each control write adds a file. Past this many, the write that finds them compacts the table,
# so reads stay a few files however many runs a fleet makes (a state table of 300 one-row
# files: a read 0.42 s and an upsert 0.20 s; compacted: 0.02 s and 0.05 s).
COMPACT_AT_FILES = 32
# Files a compaction replaced are deleted once this old: the control tables are read at their
# latest version only (no time travel, no change feed), so a day covers the slowest reader.
REPLACED_FILES_KEPT_HOURS = 24


def sql_text(value: str) -> str:
    """A string literal of `deltalake`'s SQL (DataFusion's: a quote doubled, no escapes)."""
    return "'" + value.replace("'", "''") + "'"


def rows_of(table: Any) -> list[dict[str, Any]]:
    """An Arrow table's rows as dicts (deltalake's and arro3's tables alike)."""
    columns = [column.to_pylist() for column in table.columns]
    names = table.column_names
    return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]


def retry_on_conflict(
    action: Callable[[], T], what: str, before_retry: Callable[[], None] | None = None
) -> T:
    """`action`, tried again (after `before_retry`) while it loses to a concurrent commit.

    Raises:
        ConcurrentWriteConflict: it lost `RETRIES` times in a row (`what` names the write).
    """
    from deltalake.exceptions import CommitFailedError

    for attempt in range(RETRIES):
        try:
            return action()
        except CommitFailedError as err:
            if attempt == RETRIES - 1:
                raise ConcurrentWriteConflict(
                    f"{what} lost to a concurrent commit {RETRIES} times in a row ({err})",
                    action="nothing of this write was committed (other runs commit to the same "
                    "control table this often); rerun: silver's commits carry what they "
                    "applied, and each pipeline's next run records it from silver's log",
                ) from err
            logger.info("%s hit a concurrent commit, retrying (%d)", what, attempt + 1)
            time.sleep(0.05 * (attempt + 1))
            if before_retry is not None:
                before_retry()
    raise AssertionError("unreachable")


class RowTables:
    """The tables of rows one `ControlTable` reads and writes, each opened once (module doc).

    Args:
        storage: The lake's object-store options, resolved.
        lock: Held around every use of an opened table (a deltalake table object is not for
            two threads at once); the control table holds it too, around its held rows.
    """

    def __init__(self, storage: StorageConfig, lock: threading.RLock) -> None:
        self.storage = storage
        self._lock = lock
        self._opened: dict[str, DeltaTable] = {}
        # (path, sql) -> the version of the table its rows were read at, and the rows.
        self._rows: dict[tuple[str, str], tuple[int, list[dict[str, Any]]]] = {}

    def create_missing(self, path: str, schema: Mapping[str, str]) -> None:
        """Create the table at `path` with `schema` unless this object opened it or it exists."""
        if path not in self._opened and not is_delta_table(path, self.storage):
            self._create(path, schema)

    def _latest(self, path: str) -> DeltaTable | None:
        """The table at `path` at its latest version, or None when there is none yet (opened
        on first use, then refreshed; call with the lock held)."""
        table = self._opened.get(path)
        if table is not None:
            refresh_delta_table(table, path, self.storage)
            return table
        if not is_delta_table(path, self.storage):
            return None
        table = self._opened[path] = open_delta_table(path, self.storage)
        return table

    def _table(self, path: str, schema: Mapping[str, str]) -> DeltaTable:
        """The table at `path` at its latest version, created with `schema` when missing
        (call with the lock held)."""
        table = self._latest(path)
        if table is None:
            self._create(path, schema)
            table = self._opened[path] = open_delta_table(path, self.storage)
        return table

    def _create(self, path: str, schema: Mapping[str, str]) -> None:
        def create() -> None:
            # mode="ignore": a concurrent creator that won the race leaves the table as wanted.
            create_delta_table(path, self.storage, delta_schema(schema), mode="ignore")

        retry_on_conflict(create, f"creating {path}")

    def upsert(self, path: str, schema: Mapping[str, str], rows: Any, *, predicate: str) -> None:
        """Insert or replace `rows` in the table at `path` (created with `schema` when
        missing), in one commit: the rows `predicate` names (their keys) replaced by `rows` (a
        write whose predicate names the keys: a fifth of a MERGE's time on a small table)."""
        with self._lock:
            table = self._table(path, schema)
            retry_on_conflict(
                lambda: write_opened_table(
                    table,
                    path,
                    self.storage,
                    rows,
                    mode="overwrite",
                    predicate=predicate,
                    # A table written before a column was added takes it.
                    schema_mode="merge",
                ),
                f"upsert into {path}",
                lambda: refresh_delta_table(table, path, self.storage),
            )
            self._keep_compact(path, table)

    def append(
        self, path: str, schema: Mapping[str, str], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Append `rows` to the table at `path` in one commit (created with `schema` when
        missing; a table written before a column was added takes it). Never conflicts."""
        data = arrow_table(schema, rows)
        with self._lock:
            table = self._table(path, schema)
            retry_on_conflict(
                lambda: write_opened_table(
                    table, path, self.storage, data, mode="append", schema_mode="merge"
                ),
                f"append to {path}",
                lambda: refresh_delta_table(table, path, self.storage),
            )
            self._keep_compact(path, table)

    def _keep_compact(self, path: str, table: DeltaTable) -> None:
        """Compact the table at `path` (`table`: at the version just written) when it holds
        more than COMPACT_AT_FILES files, and delete the files compactions replaced over
        REPLACED_FILES_KEPT_HOURS ago. A concurrent commit wins over the compaction: it is left
        to the next write."""
        from deltalake.exceptions import CommitFailedError

        if len(table.file_uris()) <= COMPACT_AT_FILES:
            return
        try:
            table.optimize.compact()
            table.vacuum(
                retention_hours=REPLACED_FILES_KEPT_HOURS,
                dry_run=False,
                enforce_retention_duration=False,
            )
        except CommitFailedError as err:
            logger.info("compacting %s left to a later write (a concurrent commit): %s", path, err)

    def query(self, path: str, sql: str) -> list[dict[str, Any]]:
        """The rows of `sql` over the table at `path` (named `t`; none when it does not exist
        yet): read again only when the table has a version after the one they were read at."""
        with self._lock:
            opened = self._latest(path)
            if opened is None:
                return []
            version = opened.version()
            held = self._rows.get((path, sql))
            if held is None or held[0] != version:
                from deltalake import QueryBuilder

                table = QueryBuilder().register("t", opened).execute(sql).read_all()
                held = self._rows[(path, sql)] = (version, rows_of(table))
            return [dict(row) for row in held[1]]
