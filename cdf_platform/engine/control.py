"""The control table: one state row per pipeline and one load-log row per run (two Delta tables
under one control root).

The state mirrors the watermark that silver's own log holds; when they differ (a crash between
the MERGE and the control write) it is repaired from silver. Writes need Spark; reads are
JVM-free (deltalake's query engine), so status and no-op runs never start a JVM.

Example:
    >>> control = ControlTable("/lake/_control")
    >>> control.read_states()  # doctest: +SKIP
    {'orders': {'pipeline_id': 'orders', 'last_commit_version': 57, ...}}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from cdf_platform.engine.tables import create_table_sql, is_delta_table, sql_path

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)
T = TypeVar("T")

STATE_SCHEMA: dict[str, str] = {
    "pipeline_id": "STRING",
    "source": "STRING",
    "target": "STRING",
    "source_table_id": "STRING",
    "generation": "INT",
    "last_commit_version": "BIGINT",
    "last_success_at": "TIMESTAMP",
    "last_mode": "STRING",
    "status": "STRING",
    "delete_mode": "STRING",
    "fallback_mode": "STRING",
    "max_allowed_lag_hours": "DOUBLE",
    "min_headroom_hours": "DOUBLE",
    "updated_at": "TIMESTAMP",
}
LOG_SCHEMA: dict[str, str] = {
    "run_id": "STRING",
    "pipeline_id": "STRING",
    "mode": "STRING",
    "outcome": "STRING",
    "incident_code": "STRING",
    "message": "STRING",
    "start_version": "BIGINT",
    "end_version": "BIGINT",
    "watermark_before": "BIGINT",
    "watermark_after": "BIGINT",
    "rows_inserted": "BIGINT",
    "rows_updated": "BIGINT",
    "rows_deleted": "BIGINT",
    "started_at": "TIMESTAMP",
    "finished_at": "TIMESTAMP",
    "plan_seconds": "DOUBLE",
    "read_seconds": "DOUBLE",
    "write_seconds": "DOUBLE",
    "duration_seconds": "DOUBLE",
}
# Concurrent pipelines upsert the same state table; Delta resolves that with an optimistic
# conflict, so the (tiny) state MERGE is retried.
_CONFLICT_MARKERS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "DELTA_CONCURRENT",
)
_RETRIES = 6


@dataclass(frozen=True)
class LoadLogEntry:
    """One row of the load log."""

    run_id: str
    pipeline_id: str
    mode: str
    outcome: str
    started_at: datetime
    finished_at: datetime
    incident_code: str | None = None
    message: str | None = None
    start_version: int | None = None
    end_version: int | None = None
    watermark_before: int | None = None
    watermark_after: int | None = None
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    plan_seconds: float = 0.0
    read_seconds: float = 0.0
    write_seconds: float = 0.0

    @property
    def duration_seconds(self) -> float:
        """Wall time of the run."""
        return (self.finished_at - self.started_at).total_seconds()

    def as_row(self) -> dict[str, Any]:
        """The row as written to the load log."""
        row = {name: getattr(self, name) for name in LOG_SCHEMA if name != "duration_seconds"}
        row["duration_seconds"] = self.duration_seconds
        return row


def _retry_on_conflict(action: Callable[[], T], what: str) -> T:
    for attempt in range(_RETRIES):
        try:
            return action()
        except Exception as err:
            if attempt == _RETRIES - 1 or not any(m in str(err) for m in _CONFLICT_MARKERS):
                raise
            logger.info("%s hit a concurrent commit, retrying (%d)", what, attempt + 1)
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _utc_naive(value: datetime | None) -> datetime | None:
    # Spark maps naive datetimes through the session time zone (UTC in this platform).
    if value is None or value.tzinfo is None:
        return value
    return value.astimezone(UTC).replace(tzinfo=None)


class ControlTable:
    """The platform's control tables under `root` (`pipeline_state/` and `load_log/`)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    @property
    def state_path(self) -> str:
        """The pipeline state table."""
        return f"{self.root}/pipeline_state"

    @property
    def log_path(self) -> str:
        """The load log table."""
        return f"{self.root}/load_log"

    def ensure(self, spark: SparkSession) -> None:
        """Create both tables if missing."""
        spark.sql(create_table_sql(self.state_path, STATE_SCHEMA, {}))
        spark.sql(create_table_sql(self.log_path, LOG_SCHEMA, {}))

    def _frame(self, spark: SparkSession, schema: Mapping[str, str], row: Mapping[str, Any]) -> Any:
        ddl = ", ".join(f"`{c}` {t}" for c, t in schema.items())
        values = tuple(
            _utc_naive(row.get(c)) if t == "TIMESTAMP" else row.get(c) for c, t in schema.items()
        )
        return spark.createDataFrame([values], schema=ddl)

    def upsert_state(self, spark: SparkSession, state: Mapping[str, Any]) -> None:
        """Insert or replace the state row of `state["pipeline_id"]`."""
        self.ensure(spark)
        frame = self._frame(spark, STATE_SCHEMA, {**state, "updated_at": datetime.now(UTC)})
        view = "cdf_platform_state_row"
        frame.createOrReplaceTempView(view)
        sql = f"""
            MERGE INTO {sql_path(self.state_path)} AS t USING {view} AS s
            ON t.pipeline_id = s.pipeline_id
            WHEN MATCHED THEN UPDATE SET *
            WHEN NOT MATCHED THEN INSERT *
        """
        try:
            _retry_on_conflict(lambda: spark.sql(sql).collect(), "control state upsert")
        finally:
            spark.catalog.dropTempView(view)

    def append_log(self, spark: SparkSession, entry: LoadLogEntry) -> None:
        """Append one load-log row (a blind append: never conflicts)."""
        self.ensure(spark)
        frame = self._frame(spark, LOG_SCHEMA, entry.as_row())
        _retry_on_conflict(
            lambda: frame.write.format("delta").mode("append").save(self.log_path),
            "load log append",
        )

    def _query(self, path: str, sql: str) -> list[dict[str, Any]]:
        if not is_delta_table(path):
            return []
        from deltalake import DeltaTable, QueryBuilder

        table = QueryBuilder().register("t", DeltaTable(path)).execute(sql).read_all()
        columns = [column.to_pylist() for column in table.columns]
        names = table.column_names
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]

    def read_states(self) -> dict[str, dict[str, Any]]:
        """Every pipeline's state row, JVM-free."""
        rows = self._query(self.state_path, "SELECT * FROM t")
        return {str(row["pipeline_id"]): row for row in rows}

    def read_log(self, pipeline_id: str | None = None) -> list[dict[str, Any]]:
        """Load-log rows (oldest first), optionally of one pipeline, JVM-free."""
        rows = self._query(self.log_path, "SELECT * FROM t ORDER BY started_at, run_id")
        return [r for r in rows if pipeline_id is None or r["pipeline_id"] == pipeline_id]
