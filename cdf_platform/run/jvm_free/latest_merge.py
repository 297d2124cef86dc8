"""The SCD1 merge of the JVM-free path (`cdf_platform.run.jvm_free.incremental_run`): each
key's latest change in a change set read by `deltalake`, merged into silver by `deltalake` in one
commit carrying the run's transaction, as the Spark path merges it (docs/design.md, section 5).
The pieces the SCD2 merge shares (`history_merge`): silver as this path writes it
(`SilverTable`), each key's change in each commit (`commit_winners`), the MERGE builder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import DataQualityError
from cdf_platform.core.silver_columns import SOURCE_VERSION
from cdf_platform.planning.run_result import RowCounts
from cdf_platform.spark.read.change_feed import CHANGE_TYPE, COMMIT_TIMESTAMP, COMMIT_VERSION
from cdf_platform.spark.read.changes import key_quality_problem

if TYPE_CHECKING:
    import pyarrow as pa

    from cdf_platform.spark.write.merge import TxnStamp

_GONE = "__cdf_platform_gone"  # the source row is a delete
_VERSION = "__cdf_platform_version"  # the source row's bronze commit version


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


def plain_schema(schema: Any) -> pa.Schema:
    """`schema` (arro3's or pyarrow's) as a pyarrow schema, `string_view` read as `string`."""
    import pyarrow as pa

    fields = [
        pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type, f.nullable)
        for f in pa.schema(schema)
    ]
    return pa.schema(fields)


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


def ident(name: str) -> str:
    """A column name as deltalake's SQL (DataFusion's) reads it: double-quoted."""
    return '"' + name.replace('"', '""') + '"'


def merge_into(silver: SilverTable, source: pa.Table, on: str, stamp: TxnStamp) -> Any:
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


def row_counts(metrics: dict[str, Any]) -> RowCounts:
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
    on = " AND ".join(f"t.{ident(k)} = s.{ident(k)}" for k in keys)
    newer = f"s.{ident(_VERSION)} > t.{ident(SOURCE_VERSION)}"
    gone = f"s.{ident(_GONE)}"
    row = {ident(c): f"s.{ident(c)}" for c in columns}
    row[ident(SOURCE_VERSION)] = f"s.{ident(_VERSION)}"
    values = {c: v for c, v in row.items() if c not in {ident(k) for k in keys}}
    return row_counts(
        merge_into(silver, source, on, stamp)
        .when_matched_delete(predicate=f"{gone} AND {newer}")
        .when_matched_update(values, predicate=f"NOT {gone} AND {newer}")
        .when_not_matched_insert(row, predicate=f"NOT {gone}")
        .execute()
    )
