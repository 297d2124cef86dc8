"""An incremental run without Spark: a small SCD1 or SCD2 change set read from bronze's change
feed and merged into silver by `deltalake`, the watermark in the same commit.

A Delta MERGE in Spark costs about a second and a half of the engine's CPU however few rows it
moves (its jobs, their planning and generated code); the same step by `deltalake` costs a few
hundredths (`python -m bench.deltalake_merge`). At a commit a second across a fleet that is the
difference between an engine that needs every core and one that idles. This path takes the runs
`deltalake` applies exactly as the Spark path would, and hands every other one back (None):

- the spec: a change feed source (`changes: cdf`), SCD1 or SCD2 (`history`; SCD2 staged by
  `cdf_platform.run.jvm_free.history_merge`, its columns of flat types, bronze without in-commit
  timestamps), hard deletes, no `sequence_by`, `ignore_null_updates`, `where`, `columns`,
  `transform` or expectations, path names (no catalog);
- silver: it exists, this pipeline owns it, it holds at most `SILVER_MAX_BYTES`, its columns
  are bronze's kept columns (same Arrow types) and `_source_commit_version` (SCD2: and
  `__start_at`, `__end_at`), none retired or to add, no deletion vector written in it (the
  feature may be on), no column mapping, and a protocol `deltalake` writes;
- bronze: no deletion vectors and no column mapping in its protocol (deltalake's change-feed
  reader would not apply them);
- the change set: at most `CDF_JVM_FREE_MERGE_MAX_ROWS` change rows (default 20,000; `0`
  sends every run to Spark: `cdf_platform.core.config`), every one readable;
- pyarrow installed (Spark Connect's client brings it).

The rules are the Spark path's (docs/design.md, section 5): an `update_preimage` carries no
values, but a key in a commit's preimages and in none of its inserts or postimages counts as a
delete; inside one commit an insert or postimage beats a delete; the highest commit version
wins (SCD2: each commit's change of a key is replayed in order); a null key or two surviving
rows of one key in one commit is refused (`DataQualityError`); an SCD1 change applies only
over an older silver row. The MERGE carries the stamp's transaction (app id, version) and
`userMetadata`; a transaction already at or past the version writes nothing (a newer run
applied it). Checkpoints and log cleanup stay Spark's.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdf_platform.core.config import jvm_free_merge_max_rows
from cdf_platform.core.errors import ConcurrentWriteConflict
from cdf_platform.core.faults import FaultPoint, fault_point
from cdf_platform.core.silver_columns import END_AT, SOURCE_VERSION, START_AT
from cdf_platform.core.spec.modes import ChangeSource, DeleteMode, HistoryMode
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.planning.run_result import RowCounts
from cdf_platform.run.context import RunContext, RunOutcome
from cdf_platform.run.incremental import newer_run_outcome, range_stamp
from cdf_platform.run.jvm_free.history_merge import history_source, history_stamps, merge_history
from cdf_platform.run.jvm_free.latest_merge import (
    SilverTable,
    latest_changes,
    merge_latest,
    plain_schema,
)
from cdf_platform.run.record import applied_outcome, record
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from cdf_platform.state.watermark import OWNER_PROPERTY, advance_watermark

if TYPE_CHECKING:
    import pyarrow as pa

    from cdf_platform.core.spec.pipeline_spec import PipelineSpec
    from cdf_platform.spark.write.merge import TxnStamp

logger = logging.getLogger(__name__)

# A silver larger than this goes to Spark: deltalake's MERGE rewrites every file a change
# touches, where Spark's marks the rows it replaces (deletion vectors) and skips the files the
# keys do not reach; a small silver's files are rewritten by Spark too
# (`spark.cdf_platform.copyOnWriteMergeMaxBytes`).
SILVER_MAX_BYTES = 32 * 1024 * 1024


def eligible_spec(spec: PipelineSpec) -> bool:
    """Whether `spec` is one this path applies exactly (module doc)."""
    return (
        spec.changes is ChangeSource.CDF
        and spec.history in (HistoryMode.SCD1, HistoryMode.SCD2)
        and spec.delete_mode is DeleteMode.HARD
        and spec.sequence_by is None
        and not spec.ignore_null_updates
        and spec.where is None
        and not spec.columns
        and spec.transform is None
        and not spec.expectations
        and not spec.table_names
    )


def _plain_protocol(table: Any, *, vectors: bool) -> bool:
    """Whether `table` has no column mapping, and (unless `vectors`) no deletion vectors in its
    protocol: deltalake's change-feed reader would not honour either."""
    protocol = table.protocol()
    features = {*(protocol.reader_features or ()), *(protocol.writer_features or ())}
    mapping = table.metadata().configuration.get("delta.columnMapping.mode", "none")
    if "columnMapping" in features or mapping != "none":
        return False
    return vectors or "deletionVectors" not in features


def _writable_silver(spec: PipelineSpec, run: RunContext) -> SilverTable | None:
    """Silver, if this pipeline owns it, it holds at most SILVER_MAX_BYTES, it has no column
    mapping and no deletion vector is written in it (the feature may be on: deltalake's MERGE
    rewrites the files it touches)."""
    from deltalake.exceptions import DeltaError

    table = open_delta_table(spec.target, run.control.storage)
    if table.metadata().configuration.get(OWNER_PROPERTY) != spec.id or not _plain_protocol(
        table, vectors=True
    ):
        return None
    try:
        sizes = table.get_add_actions(flatten=True).column("size_bytes").to_pylist()
        if sum(sizes) > SILVER_MAX_BYTES:
            return None
        # A file a deletion vector covers stays Spark's to rewrite (deltalake lists only those).
        if any(batch.num_rows for batch in table.deletion_vectors()):
            return None
    except DeltaError as err:  # a table feature deltalake does not implement (type widening)
        logger.info("%s: silver needs Spark (%s)", spec.id, err)
        return None
    return SilverTable.of(table)


def _kept_columns(spec: PipelineSpec, available: Sequence[str]) -> list[str]:
    """The bronze columns silver keeps, keys first (as `project_columns` keeps them)."""
    data = [c for c in available if c not in spec.keys]
    if spec.include_columns is not None:
        data = [c for c in data if c in spec.include_columns or c in spec.kept_columns]
    data = [c for c in data if c not in spec.exclude_columns or c in spec.kept_columns]
    return [*spec.keys, *data]


def read_change_rows(spec: PipelineSpec, run: RunContext, plan: RunPlan) -> pa.Table | None:
    """The change rows of the plan's range as Arrow, or None when the read fails or the set is
    larger than `jvm_free_merge_max_rows()` (the Spark path then reads it, and classifies a
    failure)."""
    import pyarrow as pa

    assert plan.start_version is not None
    try:
        bronze = open_delta_table(spec.source, run.control.storage)
        if not _plain_protocol(bronze, vectors=False):
            return None
        reader = bronze.load_cdf(
            starting_version=plan.start_version, ending_version=plan.end_version
        )
        rows = pa.table(reader.read_all())
    except Exception as err:  # any failure: Spark's read classifies it
        logger.info(
            "%s: the change feed read by deltalake failed (%s): Spark reads it", spec.id, err
        )
        return None
    if rows.num_rows > jvm_free_merge_max_rows():
        return None
    return rows.cast(plain_schema(rows.schema))


def run_jvm_free_incremental(run: RunContext, plan: RunPlan) -> RunOutcome | None:
    """The plan's incremental range applied to silver by deltalake and recorded; None when the
    run is not one this path takes (module doc): nothing was written, Spark's path runs it.

    Raises:
        DataQualityError: a null key or a duplicate key in one bronze commit.
    """
    spec = plan.spec
    if plan.mode is not RunMode.INCREMENTAL or plan.start_version is None:
        return None
    if not eligible_spec(spec) or not plan.silver.exists or jvm_free_merge_max_rows() == 0:
        return None
    if importlib.util.find_spec("pyarrow") is None:
        return None
    run.mark()
    silver = _writable_silver(spec, run)
    if silver is None:
        return None
    history = spec.history is HistoryMode.SCD2
    stamps = history_stamps(plan, silver) if history else None
    if history and stamps is None:
        return None
    rows = read_change_rows(spec, run, plan)
    if rows is None:
        return None
    feed = (CHANGE_TYPE, COMMIT_VERSION, COMMIT_TIMESTAMP)
    kept = _kept_columns(spec, [c for c in rows.column_names if c not in feed])
    platform = [SOURCE_VERSION, START_AT, END_AT] if history else [SOURCE_VERSION]
    # Silver's columns by name (Spark adds a new column after `_source_commit_version`).
    if sorted(silver.schema.names) != sorted([*kept, *platform]) or any(
        rows.schema.field(c).type != silver.schema.field(c).type for c in kept
    ):
        return None  # new, retired or retyped columns: Spark evolves silver
    rows = rows.select([*kept, *feed])
    if stamps is not None:
        changes = history_source(spec, silver, rows, kept, stamps)
    else:
        changes = latest_changes(rows, spec.keys, pipeline_id=spec.id, table=spec.source)
    run.lap("read")
    run.read_at = datetime.now(UTC)
    fault_point(FaultPoint.AFTER_READ)
    stamp = range_stamp(run, plan)
    held = silver.table.transaction_version(stamp.app_id)
    if held is not None and held >= stamp.version:
        return newer_run_outcome(run, plan)
    fault_point(FaultPoint.AFTER_QUARANTINE)  # no quarantine here: the point before the MERGE
    counts = _merge_or_none(silver, changes, spec, stamp)
    if counts is None:
        return None
    if open_delta_table(spec.target, run.control.storage).transaction_version(stamp.app_id) != (
        stamp.version
    ):
        # deltalake commits nothing for a MERGE that changes no row (a key inserted and deleted
        # inside the range): the watermark moves in a commit of the txn alone, as an advance's.
        advance_watermark(
            spec.target, stamp.app_id, stamp.version, stamp.metadata, storage=run.control.storage
        )
    run.committed_at = datetime.now(UTC)
    run.lap("merge")
    run.timings["write"] = run.timings.get("merge", 0.0)
    fault_point(FaultPoint.AFTER_MERGE)
    fault_point(FaultPoint.BEFORE_CONTROL)
    outcome = applied_outcome(plan, RunMode.INCREMENTAL, plan.end_version, counts, wrote=True)
    record(run, plan, outcome)
    run.lap("control")
    return outcome


def _merge_or_none(
    silver: SilverTable, changes: pa.Table, spec: PipelineSpec, stamp: TxnStamp
) -> RowCounts | None:
    """`merge_latest`, or None when deltalake refuses silver's protocol before writing.

    Raises:
        ConcurrentWriteConflict: another writer committed to silver first (nothing written).
    """
    from deltalake.exceptions import CommitFailedError, DeltaError, DeltaProtocolError

    try:
        if spec.history is HistoryMode.SCD2:
            return merge_history(silver, changes, spec.keys, stamp)
        return merge_latest(silver, changes, spec.keys, stamp)
    except DeltaProtocolError as err:
        logger.info("%s: silver's protocol needs Spark to write (%s)", spec.id, err)
        return None
    except (CommitFailedError, DeltaError) as err:
        if "Unsupported table features" in str(err):
            logger.info("%s: silver's protocol needs Spark to write (%s)", spec.id, err)
            return None
        if not isinstance(err, CommitFailedError):
            raise
        raise ConcurrentWriteConflict(
            f"silver {spec.target} took another commit while this run merged bronze versions "
            f"{stamp.version} and before ({err})",
            pipeline_id=spec.id,
            table=spec.target,
        ) from err
