"""Silver's shape: its data columns (keys first) and their types, the platform columns its delete
mode and history add, and the SQL fragments every write builds from them (how a row is matched,
which change is newer, what an update writes, when two rows hold the same values).

Values are compared by value whatever their type: a MAP is compared as its entries sorted by
key (two maps with the same entries in another order are equal), a VARIANT as its JSON text
(object keys sorted, as Variant's binary encoding keeps them), and structs and arrays holding
either field by field. Every other type compares as Spark compares it (`<=>`: NaN equals NaN,
-0.0 equals 0.0).

Example:
    >>> layout = SilverLayout.of(spec, snapshot.schema)  # doctest: +SKIP
    >>> layout.on_clause()  # doctest: +SKIP
    't.`id` = s.`id`'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.core.silver_columns import (
    CHANGES,
    DELETED_AT,
    END_AT,
    IS_DELETED,
    PLATFORM_COLUMNS,
    SOURCE_VERSION,
    START_AT,
)
from cdf_platform.core.spec.modes import DeleteMode, HistoryMode
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import quote_ident, sql_string

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "CHANGES",
    "DELETED_AT",
    "END_AT",
    "EVENT_GENERATION",
    "EVENT_KIND",
    "EVENT_SEQUENCE",
    "EVENT_VALUES",
    "EVENT_VERSION",
    "IS_DELETED",
    "PLATFORM_COLUMNS",
    "SOURCE_VERSION",
    "START_AT",
    "SilverLayout",
    "comparable_sql",
    "unkeyable",
]


# The fields of one change in `__changes` (SCD2 with sequence_by): its sequence value, the
# source generation (a recreated bronze starts its versions again), bronze commit version, kind
# (insert, update, delete) and the row's values (every value column).
EVENT_SEQUENCE = "sequence"
EVENT_GENERATION = "generation"
EVENT_VERSION = "version"
EVENT_KIND = "change"
EVENT_VALUES = "values"


def _needs_normalizing(data_type: DataType) -> bool:
    """Whether `data_type` holds a MAP or a VARIANT at any depth (no ordering or equality)."""
    from pyspark.sql.types import ArrayType, MapType, StructType, VariantType

    if isinstance(data_type, MapType | VariantType):
        return True
    if isinstance(data_type, ArrayType):
        return _needs_normalizing(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(_needs_normalizing(f.dataType) for f in data_type.fields)
    return False


def comparable_sql(ref: str, data_type: DataType, depth: int = 0) -> str:
    """SQL: `ref` (of `data_type`) as a value Spark can compare and order deterministically.

    Example:
        >>> from pyspark.sql.types import MapType, StringType
        >>> comparable_sql("t.`m`", MapType(StringType(), StringType()))  # doctest: +SKIP
        "array_sort(transform(map_entries(t.`m`), e0 -> named_struct('k', e0.key, ...)))"
    """
    from pyspark.sql.types import ArrayType, MapType, StructType, VariantType

    if not _needs_normalizing(data_type):
        return ref
    if isinstance(data_type, VariantType):
        return f"to_json({ref})"
    if isinstance(data_type, MapType):
        entry = f"e{depth}"
        key = comparable_sql(f"{entry}.key", data_type.keyType, depth + 1)
        value = comparable_sql(f"{entry}.value", data_type.valueType, depth + 1)
        pairs = f"transform(map_entries({ref}), {entry} -> named_struct('k', {key}, 'v', {value}))"
        return f"array_sort({pairs})"
    if isinstance(data_type, ArrayType):
        element = f"x{depth}"
        inner = comparable_sql(element, data_type.elementType, depth + 1)
        return f"transform({ref}, {element} -> {inner})"
    assert isinstance(data_type, StructType)
    fields = ", ".join(
        f"{sql_string(f.name)}, {comparable_sql(f'{ref}.{quote_ident(f.name)}', f.dataType, depth)}"
        for f in data_type.fields
    )
    # named_struct over a NULL struct would be a struct of NULLs: keep NULL apart.
    return f"CASE WHEN {ref} IS NULL THEN NULL ELSE named_struct({fields}) END"


def unkeyable(data_type: DataType) -> bool:
    """Whether a column of `data_type` cannot be a key: Spark cannot join on a MAP or a
    VARIANT (or a struct or array holding one)."""
    return _needs_normalizing(data_type)


@dataclass(frozen=True)
class SilverLayout:
    """The shape of a silver table: data columns (keys first), their types and the delete mode.

    `retired_columns` are silver columns bronze no longer has (dropped or renamed there): every
    write that touches a current row sets them to NULL, since silver mirrors bronze, where they
    hold nothing (SCD2's closed versions keep what they held).
    `deletion_vectors` applies when silver is created: a MERGE then marks the rows it replaces
    in a deletion vector instead of copying every other row of the files they sit in.
    `sequence_by` and `ignore_null_updates` are the spec's (`cdf_platform.spark.read.changes.
    ChangeOrder`): which change is newer, and whether a NULL update keeps silver's value.
    `history` and `tracked` (SCD2: the value columns whose change opens a version) are too.
    `types` maps data columns to their Spark types (for comparisons by value); a column it
    lacks compares as Spark compares it. `delete_sequence` (SQL) is the `sequence_by` value a
    delete from the source `s` carries itself (an event log's, `changes: events`); None: a
    change feed's delete carries the deleted row's, which silver keeps.
    """

    keys: list[str]
    data_columns: list[str]
    delete_mode: DeleteMode
    retired_columns: tuple[str, ...] = ()
    deletion_vectors: bool = True
    sequence_by: str | None = None
    ignore_null_updates: bool = False
    history: HistoryMode = HistoryMode.SCD1
    tracked: tuple[str, ...] = ()
    types: tuple[tuple[str, DataType], ...] = ()
    delete_sequence: str | None = None

    @property
    def value_columns(self) -> list[str]:
        """Data columns that are not keys."""
        return [c for c in self.data_columns if c not in self.keys]

    @property
    def sequenced_history(self) -> bool:
        """SCD2 ordered and dated by `sequence_by`: each version keeps its changes
        (`__changes`, `cdf_platform.spark.write.sequenced_history`)."""
        return self.history is HistoryMode.SCD2 and self.sequence_by is not None

    @classmethod
    def of(cls, spec: PipelineSpec, schema: StructType) -> SilverLayout:
        """The layout of `spec`'s silver with the data columns of `schema` (keys first)."""
        data_columns = [f.name for f in schema.fields]
        value_columns = [c for c in data_columns if c not in spec.keys]
        sequence = spec.sequence_by if spec.changes.sequences_each_change else None
        return cls(
            list(spec.keys),
            data_columns,
            spec.delete_mode,
            deletion_vectors=spec.deletion_vectors,
            sequence_by=spec.sequence_by,
            ignore_null_updates=spec.ignore_null_updates,
            history=spec.history,
            tracked=tuple(spec.tracked_columns(value_columns)),
            types=tuple((f.name, f.dataType) for f in schema.fields),
            delete_sequence=f"s.{quote_ident(sequence)}" if sequence is not None else None,
        )

    def comparable(self, column: str, expression: str) -> str:
        """SQL: `expression` (a value of data column `column`) in comparable form."""
        data_type = dict(self.types).get(column)
        return expression if data_type is None else comparable_sql(expression, data_type)

    def on_clause(self) -> str:
        """MERGE condition on the keys (keys are never null: checked before)."""
        return " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in self.keys)

    def newer(self, version: str) -> str:
        """SQL: the source row `s` (of bronze version `version`) is newer than silver's `t`."""
        by_version = f"{version} > t.{SOURCE_VERSION}"
        if self.sequence_by is None:
            return by_version
        seq = quote_ident(self.sequence_by)
        return f"(s.{seq} > t.{seq} OR t.{seq} IS NULL OR (s.{seq} = t.{seq} AND {by_version}))"

    def restarts(self, reset: str | None) -> str | None:
        """SQL: when an update's values stand as they are, NULLs included: `reset` (a change of
        the set restarted the key), or silver's row is a tombstone (soft-deleted: absent for
        every rule about values, so the update starts from the source row alone)."""
        tombstone = f"t.{IS_DELETED}" if self.delete_mode is DeleteMode.SOFT else None
        conditions = [c for c in (reset, tombstone) if c]
        return " OR ".join(conditions) if conditions else None

    def value(self, column: str, *, reset: str | None) -> str:
        """SQL: the value an update writes to `column`: the source's, or with
        `ignore_null_updates` silver's where the source holds NULL, unless `restarts(reset)`."""
        source = f"s.{quote_ident(column)}"
        if not self.ignore_null_updates:
            return source
        kept = f"coalesce({source}, t.{quote_ident(column)})"
        restart = self.restarts(reset)
        return f"CASE WHEN {restart} THEN {source} ELSE {kept} END" if restart else kept

    def unchanged(self, *, reset: str | None = None) -> str:
        """SQL: every value column of `t` already holds what an update from `s` would write."""
        if not self.value_columns:
            return "TRUE"
        return " AND ".join(
            f"{self.comparable(c, f't.{quote_ident(c)}')} <=> "
            f"{self.comparable(c, self.value(c, reset=reset))}"
            for c in self.value_columns
        )

    def retired_nulls(self) -> list[str]:
        """Assignments that keep the retired columns NULL."""
        return [f"{quote_ident(c)} = NULL" for c in self.retired_columns]

    def holds_retired_value(self, alias: str = "t") -> str:
        """SQL: the row `alias` still holds a value in a retired column (FALSE without any)."""
        held = [f"{alias}.{quote_ident(c)} IS NOT NULL" for c in self.retired_columns]
        return f"({' OR '.join(held)})" if held else "FALSE"
