"""Row counts of a silver commit written by the platform.

Hard-delete MERGEs report exact inserted/updated/deleted counts in Delta's `operationMetrics`.
A soft delete is an UPDATE to Delta, so soft-delete pipelines count from silver's own change feed
for that single commit (small: only that commit's `_change_data` files are read).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from cdf_platform.core.spec.modes import DeleteMode
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.planning.run_result import NO_ROWS, RowCounts
from cdf_platform.spark.read.change_feed import read_changes
from cdf_platform.state.watermark import HISTORY_SCAN, parse_user_metadata

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def find_run_commit(
    target: str, pipeline_id: str, run_id: str, storage: StorageConfig
) -> dict[str, object] | None:
    """The history entry of the silver commit written by `run_id`, JVM-free (None if absent);
    `storage`: the lake's object-store options."""
    for entry in open_delta_table(target, storage).history(HISTORY_SCAN):
        ours = parse_user_metadata(entry.get("userMetadata"), pipeline_id)
        if ours is not None and ours.get("run_id") == run_id:
            return entry
    return None


def silver_commit_counts(
    spark: SparkSession,
    target: str,
    pipeline_id: str,
    run_id: str,
    delete_mode: DeleteMode,
    *,
    storage: StorageConfig,
) -> RowCounts:
    """The rows the silver commit of `run_id` changed (none if there is no such commit);
    `storage`: the lake's object-store options."""
    entry = find_run_commit(target, pipeline_id, run_id, storage)
    return NO_ROWS if entry is None else commit_counts(spark, target, entry, delete_mode)


def commit_counts(
    spark: SparkSession, target: str, entry: Mapping[str, object], delete_mode: DeleteMode
) -> RowCounts:
    """The rows changed by the silver commit whose history entry is `entry` (a MERGE, or the
    append of a first load: `cdf_platform.spark.write.merge.load_snapshot`)."""
    raw = entry.get("operationMetrics")
    metrics = raw if isinstance(raw, dict) else {}
    if entry.get("operation") == "WRITE":
        return RowCounts(inserted=int(metrics.get("numOutputRows", 0)))
    if delete_mode is DeleteMode.HARD:
        return RowCounts(
            int(metrics.get("numTargetRowsInserted", 0)),
            int(metrics.get("numTargetRowsUpdated", 0)),
            int(metrics.get("numTargetRowsDeleted", 0)),
        )
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    version = int(str(entry["version"]))
    changes = read_changes(spark, target, version, version)
    postimage = F.col("_change_type") == "update_postimage"
    row = changes.agg(
        F.count_if(F.col("_change_type") == "insert").alias("inserted"),
        F.count_if(postimage & ~F.col("_is_deleted")).alias("updated"),
        F.count_if(postimage & F.col("_is_deleted")).alias("deleted"),
    ).collect()[0]
    return RowCounts(int(row["inserted"] or 0), int(row["updated"] or 0), int(row["deleted"] or 0))
