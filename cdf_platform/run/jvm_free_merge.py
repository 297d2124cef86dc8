"""An incremental run without Spark: a small SCD1 or SCD2 change set read from bronze's change
feed and merged into silver by `deltalake`, the watermark in the same commit.

A Delta MERGE in Spark costs about a second and a half of the engine's CPU however few rows it
moves (its jobs, their planning and generated code); the same step by `deltalake` costs a few
hundredths (`python -m bench.deltalake_merge`). At a commit a second across a fleet that is the
difference between an engine that needs every core and one that idles. This path takes the runs
`deltalake` applies exactly as the Spark path would, and hands every other one back (None):

- the spec: a change feed source (`changes: cdf`), SCD1 or SCD2 (`history`; SCD2 staged by
  `cdf_platform.run.jvm_free_history`, its columns of flat types, bronze without in-commit
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
from collections.abc import Container, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cdf_platform.core.config import jvm_free_merge_max_rows
from cdf_platform.core.errors import ConcurrentWriteConflict, DataQualityError
from cdf_platform.core.faults import FaultPoint, fault_point
from cdf_platform.core.silver_columns import END_AT, SOURCE_VERSION, START_AT
from cdf_platform.core.spec.pipeline_spec import ChangeSource, DeleteMode, HistoryMode
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.planning.run_result import RowCounts
from cdf_platform.run.context import RunContext, RunOutcome
from cdf_platform.run.incremental import newer_run_outcome, range_stamp
from cdf_platform.run.jvm_free_history import (
    ACTION,
    CONTINUED,
    IN_COMMIT_TIMESTAMPS,
    Change,
    comparable_schema,
    spark_commit_timestamps,
    staged_history,
    staged_table,
)
from cdf_platform.run.record import applied_outcome, record
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from cdf_platform.spark.read.changes import key_quality_problem
from cdf_platform.state.watermark import (
    OWNER_PROPERTY,
    advance_watermark,
)

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
_GONE = "__cdf_platform_gone"  # the source row is a delete
_VERSION = "__cdf_platform_version"  # the source row's bronze commit version


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


@dataclass(frozen=True)
class SilverTable:
    """Silver as this path writes it: its `deltalake` table, and its columns with their Arrow
    types (`string_view` read as `string`)."""

    table: Any  # deltalake.DeltaTable
    schema: pa.Schema

    @classmethod
    def of(cls, table: Any) -> SilverTable:
        """Silver's `deltalake` table `table`, with its schema."""
        return cls(table, plain_schema(table.schema().to_arrow()))


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


def plain_schema(schema: Any) -> pa.Schema:
    """`schema` (arro3's or pyarrow's) as a pyarrow schema, `string_view` read as `string`."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type, f.nullable)
        for f in pa.schema(schema)
    ]
    return pa.schema(fields)


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


def commit_winners(
    rows: pa.Table, keys: Sequence[str], *, pipeline_id: str, table: str
) -> dict[tuple[tuple[Any, ...], int], tuple[bool, int]]:
    """Each key's change in each commit (module doc): (key, version) -> (whether it deletes
    the key, the row that carries it).

    Raises:
        DataQualityError: a null key, or two surviving rows of one key in one commit (the first
            by commit version).
    """
    change = rows.column(CHANGE_TYPE).to_pylist()
    versions = rows.column(COMMIT_VERSION).to_pylist()
    key_values = list(zip(*(rows.column(k).to_pylist() for k in keys), strict=True))
    survivors: dict[tuple[Any, int], int] = {}
    winner: dict[tuple[Any, int], tuple[int, int]] = {}  # (key, version) -> (priority, row)
    problems: list[tuple[int, dict[str, Any], int]] = []
    for index, (key, version, kind) in enumerate(zip(key_values, versions, change, strict=True)):
        if any(value is None for value in key):
            problems.append((version, dict(zip(keys, key, strict=True)), 1))
            continue
        survives = kind not in ("delete", "update_preimage")
        unit = (key, version)
        survivors[unit] = survivors.get(unit, 0) + int(survives)
        priority = 2 if survives else 0
        if unit not in winner or priority > winner[unit][0]:
            winner[unit] = (priority, index)
    problems += [
        (version, dict(zip(keys, key, strict=True)), count)
        for (key, version), count in survivors.items()
        if count > 1
    ]
    if problems:
        version, row, count = min(problems, key=lambda problem: problem[0])
        raise DataQualityError(
            key_quality_problem(row, keys, f"bronze commit {version}", count, None),
            pipeline_id=pipeline_id,
            table=table,
            version=version,
        )
    return {unit: (priority == 0, index) for unit, (priority, index) in winner.items()}


def latest_changes(
    rows: pa.Table, keys: Sequence[str], *, pipeline_id: str, table: str
) -> pa.Table:
    """One row per key: its latest change (module doc), with `_GONE` (a delete) and `_VERSION`.

    Raises:
        DataQualityError: a null key, or two surviving rows of one key in one commit (the first
            by commit version).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    latest: dict[Any, tuple[int, int, bool]] = {}  # key -> (version, row, gone)
    winners = commit_winners(rows, keys, pipeline_id=pipeline_id, table=table)
    for (key, version), (gone, index) in winners.items():
        if key not in latest or version > latest[key][0]:
            latest[key] = (version, index, gone)
    chosen = sorted(latest.values(), key=lambda entry: entry[1])
    picked = rows.take(pa.array([index for _, index, _ in chosen], pa.int64()))
    picked = picked.drop_columns([CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION])
    picked = picked.append_column(_GONE, pa.array([gone for _, _, gone in chosen], pa.bool_()))
    return picked.append_column(
        _VERSION, pc.cast(pa.array([version for version, _, _ in chosen]), pa.int64())
    )


def _ident(name: str) -> str:
    """A column name as deltalake's SQL (DataFusion's) reads it: double-quoted."""
    return '"' + name.replace('"', '""') + '"'


def _merge(silver: SilverTable, source: pa.Table, on: str, stamp: TxnStamp) -> Any:
    """deltalake's MERGE of `source` (`s`) into silver (`t`) on `on`, its commit carrying
    `stamp` (checkpoints and log cleanup left to Spark): add the clauses, then `execute`."""
    from deltalake import CommitProperties, PostCommitHookProperties, Transaction

    return silver.table.merge(
        source,
        on,
        source_alias="s",
        target_alias="t",
        commit_properties=CommitProperties(
            custom_metadata={"userMetadata": stamp.metadata},
            app_transactions=[Transaction(stamp.app_id, stamp.version)],
        ),
        post_commithook_properties=PostCommitHookProperties(
            create_checkpoint=False, cleanup_expired_logs=False
        ),
    )


def _counts(metrics: dict[str, Any]) -> RowCounts:
    """The rows a deltalake MERGE inserted, updated and deleted in silver."""
    return RowCounts(
        int(metrics.get("num_target_rows_inserted", 0)),
        int(metrics.get("num_target_rows_updated", 0)),
        int(metrics.get("num_target_rows_deleted", 0)),
    )


def merge_latest(
    silver: SilverTable, source: pa.Table, keys: Sequence[str], stamp: TxnStamp
) -> RowCounts:
    """MERGE `source` (`latest_changes`) into silver in one commit carrying `stamp`; the rows
    it inserted, updated and deleted."""
    columns = [c for c in silver.schema.names if c != SOURCE_VERSION]
    on = " AND ".join(f"t.{_ident(k)} = s.{_ident(k)}" for k in keys)
    newer = f"s.{_ident(_VERSION)} > t.{_ident(SOURCE_VERSION)}"
    gone = f"s.{_ident(_GONE)}"
    row = {_ident(c): f"s.{_ident(c)}" for c in columns}
    row[_ident(SOURCE_VERSION)] = f"s.{_ident(_VERSION)}"
    values = {c: v for c, v in row.items() if c not in {_ident(k) for k in keys}}
    return _counts(
        _merge(silver, source, on, stamp)
        .when_matched_delete(predicate=f"{gone} AND {newer}")
        .when_matched_update(values, predicate=f"NOT {gone} AND {newer}")
        .when_not_matched_insert(row, predicate=f"NOT {gone}")
        .execute()
    )


def history_stamps(plan: RunPlan, silver: SilverTable) -> dict[int, datetime] | None:
    """SCD2: the commit timestamps of the plan's range as Spark's change feed gives them
    (`cdf_platform.run.jvm_free_history`), or None when this path does not take the run: a
    silver column of a type it does not compare as Spark does, bronze with in-commit
    timestamps, or a commit file of the range gone. Decided before the change feed is read."""
    assert plan.start_version is not None
    log = plan.window.log
    metadata = log.metadata_at(plan.end_version)
    if metadata is None or metadata.configuration.get(IN_COMMIT_TIMESTAMPS, "").lower() == "true":
        return None
    if not comparable_schema(silver.schema):
        return None
    return spark_commit_timestamps(log, plan.start_version, plan.end_version)


def history_source(
    spec: PipelineSpec,
    silver: SilverTable,
    rows: pa.Table,
    kept: Sequence[str],
    stamps: dict[int, datetime],
) -> pa.Table:
    """SCD2: the staged source of the MERGE (`cdf_platform.run.jvm_free_history`) from the
    change rows `rows`, dated by `stamps` (`history_stamps`).

    Raises:
        DataQualityError: a null key, or two surviving rows of one key in one commit.
    """
    values = [c for c in kept if c not in spec.keys]
    winners = commit_winners(rows, spec.keys, pipeline_id=spec.id, table=spec.source)
    columns = [rows.column(c).to_pylist() for c in values]
    by_key: dict[tuple[Any, ...], list[Change]] = {}
    for (key, version), (gone, index) in sorted(winners.items(), key=lambda item: item[0][1]):
        by_key.setdefault(key, []).append(
            Change(version, gone, tuple(column[index] for column in columns))
        )
    tracked = [values.index(c) for c in spec.tracked_columns(values)]
    open_versions = _open_versions(silver, spec.keys, values, by_key)
    staged = staged_history(by_key, open_versions, tracked, stamps)
    return staged_table(staged, spec.keys, values, silver.schema)


def _open_versions(
    silver: SilverTable,
    keys: Sequence[str],
    values: Sequence[str],
    touched: Container[tuple[Any, ...]],
) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Silver's open versions (`__end_at` NULL) of the `touched` keys: key -> values (read by
    DataFusion: `to_pyarrow_dataset` refuses a table with the deletion-vector feature on)."""
    import pyarrow as pa
    from deltalake import QueryBuilder

    selected = ", ".join(_ident(c) for c in [*keys, *values])
    reader = (
        QueryBuilder()
        .register("silver", silver.table)
        .execute(f"SELECT {selected} FROM silver WHERE {_ident(END_AT)} IS NULL")
    )
    wanted = pa.schema([silver.schema.field(c) for c in [*keys, *values]])
    open_rows = pa.table(reader.read_all()).cast(wanted)
    key_columns = [open_rows.column(k).to_pylist() for k in keys]
    value_columns = [open_rows.column(c).to_pylist() for c in values]
    found = {}
    for index, key in enumerate(zip(*key_columns, strict=True)):
        if key in touched:
            found[key] = tuple(column[index] for column in value_columns)
    return found


def merge_history(
    silver: SilverTable, source: pa.Table, keys: Sequence[str], stamp: TxnStamp
) -> RowCounts:
    """MERGE a staged SCD2 source (`history_source`) into silver in one commit carrying
    `stamp`; the rows it inserted and updated (versions opened, closed or updated in place)."""
    if not source.num_rows:  # no version opened, closed or changed: the caller advances
        return RowCounts(0, 0, 0)
    values = [c for c in silver.schema.names if c not in {*keys, SOURCE_VERSION, START_AT, END_AT}]
    # As `cdf_platform.spark.write.history.merge_history_sql`: a `current` row meets silver's
    # open version of its key, to close it or (continued) update it in place; an `insert` row
    # adds a version.
    on = " AND ".join(
        [
            f"s.{_ident(ACTION)} = 'current'",
            f"t.{_ident(END_AT)} IS NULL",
            *(f"t.{_ident(k)} = s.{_ident(k)}" for k in keys),
        ]
    )
    continued = f"s.{_ident(CONTINUED)}"
    update = {_ident(END_AT): f"s.{_ident(END_AT)}"} | {
        _ident(c): f"CASE WHEN {continued} THEN s.{_ident(c)} ELSE t.{_ident(c)} END"
        for c in values
    }
    inserted = [*keys, *values, SOURCE_VERSION, START_AT, END_AT]
    return _counts(
        _merge(silver, source, on, stamp)
        .when_matched_update(update)
        .when_not_matched_insert(
            {_ident(c): f"s.{_ident(c)}" for c in inserted},
            predicate=f"s.{_ident(ACTION)} = 'insert'",
        )
        .execute()
    )


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
