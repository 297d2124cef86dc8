"""Carrying out a consumer-aware VACUUM decision (`cdf_platform.planning.vacuum.plan_vacuum`):
raise the retention properties it decided, then VACUUM, with START/END logged in the history.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.core.sql import sql_path, sql_string
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.planning.vacuum import (
    DELETED_FILE_RETENTION,
    LOG_RETENTION,
    VacuumAction,
    VacuumDecision,
)
from cdf_platform.spark.runtime.session import new_session, scoped_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class VacuumOutcome:
    """What `execute_vacuum` did."""

    decision: VacuumDecision
    vacuumed: bool
    files_deleted: int | None


def execute_vacuum(
    spark: SparkSession,
    decision: VacuumDecision,
    *,
    storage: StorageConfig = ENVIRONMENT_ONLY,
    listing_parallelism: int | None = None,
) -> VacuumOutcome:
    """Apply `decision`: raise retention properties if decided, then VACUUM (or nothing).

    Args:
        spark: The session.
        decision: From `plan_vacuum`.
        storage: The lake's object-store options (the table's history is read with them;
            default: the environment's settings alone).
        listing_parallelism: Tasks VACUUM lists the table with
            (`spark.sql.sources.parallelPartitionDiscovery.parallelism`, 10,000 by default:
            right for huge tables on a cluster, tens of wasted seconds on a small local one).
    """
    logger.info("maintenance of %s: %s (%s)", decision.table, decision.action, decision.reason)
    if not decision.will_vacuum:
        return VacuumOutcome(decision, vacuumed=False, files_deleted=0)
    properties = {}
    if decision.new_deleted_file_retention_hours is not None:
        properties[DELETED_FILE_RETENTION] = _interval(decision.new_deleted_file_retention_hours)
    if decision.new_log_retention_hours is not None:
        properties[LOG_RETENTION] = _interval(decision.new_log_retention_hours)
    table = sql_path(decision.table)
    if properties:
        # Raise logRetentionDuration first: Delta refuses a log retention below the file one.
        ordered = sorted(properties.items(), key=lambda kv: kv[0] != LOG_RETENTION)
        for key, value in ordered:
            spark.sql(
                f"ALTER TABLE {table} SET TBLPROPERTIES ({sql_string(key)} = {sql_string(value)})"
            )
    # Record VACUUM START/END in the table history, so every deletion is auditable.
    confs = {"spark.databricks.delta.vacuum.logging.enabled": "true"}
    if listing_parallelism is not None:
        confs["spark.sql.sources.parallelPartitionDiscovery.parallelism"] = str(listing_parallelism)
    statement = f"VACUUM {table}"
    if decision.action is VacuumAction.VACUUM_RETAIN_ZERO:
        # Delta refuses a retention below the table's unless this check is off.
        confs["spark.databricks.delta.retentionDurationCheck.enabled"] = "false"
        statement += " RETAIN 0 HOURS"
    session = new_session(spark)
    with scoped_conf(session, confs):
        session.sql(statement).collect()
    deleted = _files_deleted(decision.table, storage)
    return VacuumOutcome(decision, vacuumed=True, files_deleted=deleted)


def _files_deleted(table: str, storage: StorageConfig) -> int | None:
    """numDeletedFiles of the latest VACUUM END commit (None when VACUUM logging is off)."""
    for entry in open_delta_table(table, storage).history(10):
        if entry.get("operation") == "VACUUM END":
            metrics = entry.get("operationMetrics") or {}
            return int(metrics.get("numDeletedFiles", 0))
    return None


def _interval(hours: float) -> str:
    return f"interval {math.ceil(hours)} hours"
