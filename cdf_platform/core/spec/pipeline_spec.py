"""PipelineSpec: what one pipeline keeps in step, and under which policy.

Specs are loaded from a YAML file by `cdf_platform.core.spec.spec_file` (`pipelines.yaml` by
default, `$CDF_PIPELINES_FILE` or an explicit path otherwise). Relative `source`/`target` paths
are resolved against the lake root; a dotted name without `/` (`bronze.orders`,
`main.bronze.orders`) is a catalog table name, located through Spark's catalog
(`cdf_platform.spark.table.catalog`) and recorded in the control tables for the JVM-free parts
(`cdf_platform.state.catalog_names`). The policies' modes (`DeleteMode`, `HistoryMode`,
`ChangeSource`, `FallbackMode`, `OnSpecChange`, `VerifyRepair`) are in
`cdf_platform.core.spec.modes`.

Example:
    >>> spec = PipelineSpec(id="orders", source="/lake/bronze/orders",
    ...                     target="/lake/silver/orders", keys=["order_id"])
    >>> spec.delete_mode.value, spec.fallback_mode.value
    ('hard', 'SNAPSHOT_REBUILD')
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from cdf_platform.core.silver_columns import PLATFORM_COLUMNS
from cdf_platform.core.spec.event_spec import EventSpec
from cdf_platform.core.spec.expectations import Expectation, check_unique_names
from cdf_platform.core.spec.modes import (
    ChangeSource,
    DeleteMode,
    FallbackMode,
    HistoryMode,
    OnSpecChange,
    VerifyRepair,
)
from cdf_platform.core.storage import is_table_name, resolve_location

# Pipeline ids become Delta txn app ids, asset names and Dagster pool names.
PIPELINE_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
# Column names are always backtick-quoted in SQL; this pattern keeps them readable as well.
COLUMN_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A Python transform: `package.module:function`.
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
TRANSFORM_PATTERN = re.compile(rf"^{_NAME}(\.{_NAME})*:{_NAME}$")
# Columns the platform adds to silver.
RESERVED_COLUMNS = PLATFORM_COLUMNS
CDF_COLUMNS = frozenset({"_change_type", "_commit_version", "_commit_timestamp"})


class PipelineSpec(BaseModel):
    """One bronze -> silver pipeline.

    Example:
        >>> PipelineSpec(id="customers", source="bronze/customers", target="silver/customers",
        ...              keys=["customer_id"], delete_mode="soft").delete_mode
        <DeleteMode.SOFT: 'soft'>
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="Pipeline id: lowercase letters, digits, `_`; unique.")
    source: str = Field(
        description="Bronze Delta table: a path or URI (relative: under the lake), or a catalog "
        "name (`schema.table`, `catalog.schema.table`)."
    )
    target: str = Field(
        description="Silver Delta table: a path or URI (relative: under the lake), or a catalog "
        "name (created and registered by the first run when missing)."
    )
    keys: list[str] = Field(min_length=1, description="Primary-key columns of the source.")
    delete_mode: DeleteMode = Field(default=DeleteMode.HARD, description="`hard` or `soft`.")
    changes: ChangeSource = Field(
        default=ChangeSource.CDF,
        description="How bronze gives its changes: `cdf`, its Change Data Feed (each run MERGEs "
        "the versions after the watermark); `snapshots`, bronze is read whole at a pinned "
        "version and reconciled into silver (a table without a change feed; each run costs a "
        "read of the whole table); `events`, bronze is an append-only log of change events "
        "(`events` says how to read one; `sequence_by` orders them).",
    )
    events: EventSpec | None = Field(
        default=None,
        description="`changes: events`: the operation column and its values, and the row "
        "image (`EventSpec`).",
    )
    fallback_mode: FallbackMode = Field(
        default=FallbackMode.SNAPSHOT_REBUILD,
        description="`SNAPSHOT_REBUILD` or `FAIL_FAST` when the window is lost or bronze reset.",
    )
    on_spec_change: OnSpecChange = Field(
        default=OnSpecChange.RECONCILE,
        description="`reconcile`: an edit of a row-shaping field (`where`, `columns`, ...) "
        "reconciles silver from a pinned snapshot on the next run; `forward_only`: the edit "
        "applies to new changes only, recorded and shown until the next rebuild.",
    )
    max_allowed_lag_hours: float = Field(
        default=24.0, gt=0, description="consumer_lag fails above this many hours of lag."
    )
    min_headroom_hours: float = Field(
        default=24.0, ge=0, description="replay_window warns below this many hours of headroom."
    )
    include_columns: list[str] | None = Field(
        default=None, description="Only these source columns (keys are always included)."
    )
    exclude_columns: list[str] = Field(
        default_factory=list, description="Source columns never copied to silver."
    )
    deletion_vectors: bool = Field(
        default=True,
        description="Create silver with deletion vectors: a MERGE marks the rows it replaces "
        "instead of rewriting whole files (readers need Delta reader version 3).",
    )
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="Derived silver columns, in order: name -> Spark SQL expression over the "
        "bronze row (and the columns derived before it). A bronze column of the same name is "
        "replaced; keys cannot be derived. Deterministic row-level expressions only.",
    )
    where: str | None = Field(
        default=None,
        description="Row filter, a Spark SQL boolean expression (it sees derived columns): a row "
        "it drops, or that stops matching, is a delete in silver; NULL counts as false.",
    )
    expectations: list[Expectation] = Field(
        default_factory=list,
        description="Named data-quality rules on the row silver would hold (after "
        "`transform`, `columns`, `where`), each with an action: `warn`, `drop`, `quarantine` "
        "or `fail` (`Expectation`).",
    )
    transform: str | None = Field(
        default=None,
        description="A Python function `package.module:function` (DataFrame -> DataFrame) "
        "applied to every change and snapshot row before `columns`: row-level, it keeps the "
        "keys and the change-feed columns as they are.",
    )
    sequence_by: str | None = Field(
        default=None,
        description="Order a key's changes by this column (bronze or derived) instead of the "
        "commit version, ties broken by commit version: an older change arriving later never "
        "overwrites a newer one. A NULL value is a data error. With `history: scd2` it also "
        "dates the versions (`__start_at`/`__end_at` hold its values) and a late change is "
        "placed where its value belongs in the history.",
    )
    ignore_null_updates: bool = Field(
        default=False,
        description="A NULL in an update keeps silver's value (an insert's NULLs are kept).",
    )
    history: HistoryMode = Field(
        default=HistoryMode.SCD1,
        description="`scd1` (current rows) or `scd2` (every version, `__start_at`/`__end_at`).",
    )
    track_history_columns: list[str] | None = Field(
        default=None,
        description="scd2: only changes of these columns open a new version (default: all); "
        "a change of the others updates the current version in place.",
    )
    track_history_except_columns: list[str] = Field(
        default_factory=list,
        description="scd2: changes of these columns update the current version in place.",
    )
    bronze_table: str | None = Field(
        default=None,
        description="Name of the bronze asset (bronze/<name>); default: last part of `source`.",
    )
    verify: bool = Field(
        default=True,
        description="The scheduled verification (`verify_job`, weekly) compares this silver "
        "with its spec applied to bronze; false leaves it out (`cdf-platform verify --pipeline "
        "<id>` still verifies it). Shapes no row.",
    )
    verify_repair: VerifyRepair = Field(
        default=VerifyRepair.MANUAL,
        description="`manual`: the scheduled verification reports differing keys; `auto`: it "
        "also repairs them (the quiet reconcile). Shapes no row.",
    )

    @field_validator("id")
    @classmethod
    def _check_id(cls, value: str) -> str:
        if not PIPELINE_ID_PATTERN.match(value):
            raise ValueError(
                f"pipeline id {value!r} must match {PIPELINE_ID_PATTERN.pattern} "
                "(lowercase letters, digits and _, starting with a letter)"
            )
        return value

    @field_validator("source", "target")
    @classmethod
    def _check_table(cls, value: str) -> str:
        if not value.strip() or any(ch in value for ch in "\n\r\0`;"):
            raise ValueError(f"table location {value!r} is empty or has `, ; or control chars")
        # Catalog names are case-insensitive (Spark's and the Hive metastore's default).
        return value.strip().lower() if is_table_name(value.strip()) else value.strip()

    @field_validator(
        "keys",
        "exclude_columns",
        "include_columns",
        "track_history_columns",
        "track_history_except_columns",
    )
    @classmethod
    def _check_columns(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        for column in value:
            if not COLUMN_PATTERN.match(column):
                raise ValueError(f"column {column!r} must match {COLUMN_PATTERN.pattern}")
            if column in RESERVED_COLUMNS | CDF_COLUMNS:
                raise ValueError(f"column {column!r} is reserved by the platform")
        if len(set(value)) != len(value):
            raise ValueError(f"columns listed twice in {value}")
        return value

    @field_validator("columns")
    @classmethod
    def _check_derived(cls, value: dict[str, str]) -> dict[str, str]:
        for name, expression in value.items():
            if not COLUMN_PATTERN.match(name):
                raise ValueError(f"derived column {name!r} must match {COLUMN_PATTERN.pattern}")
            if name in RESERVED_COLUMNS | CDF_COLUMNS:
                raise ValueError(f"derived column {name!r} is reserved by the platform")
            if not isinstance(expression, str) or not expression.strip():
                raise ValueError(f"derived column {name!r} needs a Spark SQL expression")
        return value

    @field_validator("where")
    @classmethod
    def _check_where(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("`where` is empty: leave it out to keep every row")
        return value

    @field_validator("expectations")
    @classmethod
    def _check_expectations(cls, value: list[Expectation]) -> list[Expectation]:
        return check_unique_names(value)

    @field_validator("transform")
    @classmethod
    def _check_transform(cls, value: str | None) -> str | None:
        if value is not None and not TRANSFORM_PATTERN.match(value):
            raise ValueError(
                f"transform {value!r} must name a function as `package.module:function`"
            )
        return value

    @field_validator("sequence_by")
    @classmethod
    def _check_sequence_by(cls, value: str | None) -> str | None:
        if value is not None and not COLUMN_PATTERN.match(value):
            raise ValueError(f"sequence_by {value!r} must match {COLUMN_PATTERN.pattern}")
        if value in RESERVED_COLUMNS | CDF_COLUMNS:
            raise ValueError(
                f"sequence_by {value!r} is a platform column (the commit version is already the "
                "default order)"
            )
        return value

    @field_validator("bronze_table")
    @classmethod
    def _check_bronze_table(cls, value: str | None) -> str | None:
        if value is not None and not COLUMN_PATTERN.match(value):
            raise ValueError(f"bronze_table {value!r} must match {COLUMN_PATTERN.pattern}")
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> PipelineSpec:
        if set(self.keys) & set(self.exclude_columns):
            raise ValueError(f"keys {self.keys} cannot be excluded")
        if derived_keys := sorted(set(self.keys) & set(self.columns)):
            raise ValueError(
                f"keys {derived_keys} cannot be derived in `columns` (a changed key breaks the "
                "one-row-per-key match between bronze and silver)"
            )
        self._check_history()
        if self.sequence_by in self.keys:
            raise ValueError(f"sequence_by {self.sequence_by!r} is a key: it never changes")
        if self.sequence_by is not None and self.sequence_by in self.exclude_columns:
            raise ValueError(
                f"sequence_by {self.sequence_by!r} is excluded, but silver keeps it to compare "
                "later changes with"
            )
        if self.source.rstrip("/") == self.target.rstrip("/"):
            raise ValueError("source and target are the same table")
        self._check_events()
        return self

    def _check_events(self) -> None:
        if self.changes is not ChangeSource.EVENTS:
            if self.events is not None:
                raise ValueError("`events` describes an event log: it needs `changes: events`")
            return
        if self.events is None:
            raise ValueError(
                "`changes: events` needs `events` (the operation column and its values)"
            )
        if self.sequence_by is None:
            raise ValueError(
                "`changes: events` needs `sequence_by`: events of one key arrive in one commit "
                "and out of order across commits, and only their sequence orders them"
            )
        if self.events.truncates and self.history is HistoryMode.SCD2:
            raise ValueError(
                "events.truncates needs `history: scd1`: a truncate says nothing about when "
                "each key's version ended"
            )

    @property
    def bronze_name(self) -> str:
        """Table name of the bronze asset: `bronze_table`, else the last part of `source`."""
        last = self.source.rstrip("/").rsplit("/", 1)[-1]
        if is_table_name(self.source):
            last = self.source.rsplit(".", 1)[-1]
        return self.bronze_table or re.sub(r"\W", "_", last)

    def _check_history(self) -> None:
        tracking = self.track_history_columns is not None or self.track_history_except_columns
        if self.history is HistoryMode.SCD1:
            if tracking:
                raise ValueError("track_history_columns / _except_columns need `history: scd2`")
            return
        if self.track_history_columns is not None and self.track_history_except_columns:
            raise ValueError("give track_history_columns or track_history_except_columns, not both")
        if tracked_keys := sorted(
            set(self.keys) & set(self.track_history_columns or self.track_history_except_columns)
        ):
            raise ValueError(f"keys {tracked_keys} identify a row; do not list them for history")
        if self.delete_mode is DeleteMode.SOFT:
            raise ValueError(
                "`history: scd2` does not take delete_mode: soft (a delete already closes the "
                "key's current version, and nothing is removed)"
            )

    def tracked_columns(self, value_columns: Iterable[str]) -> list[str]:
        """SCD2: the value columns whose change opens a new version."""
        if self.track_history_columns is not None:
            return [c for c in value_columns if c in self.track_history_columns]
        return [c for c in value_columns if c not in self.track_history_except_columns]

    @property
    def conforms(self) -> bool:
        """Whether rows are transformed or judged between the read and the MERGE."""
        return bool(self.columns or self.where or self.transform or self.expectations)

    @property
    def kept_columns(self) -> list[str]:
        """Columns silver always has whatever `include_columns` says: the keys, the derived
        columns and the sequence column."""
        kept = [*self.keys, *self.columns]
        if self.sequence_by is not None and self.sequence_by not in kept:
            kept.append(self.sequence_by)
        return kept

    @property
    def table_names(self) -> dict[str, str]:
        """The catalog names among `source` and `target`, by role (`source`, `target`)."""
        return {
            role: value
            for role, value in (("source", self.source), ("target", self.target))
            if is_table_name(value)
        }

    def resolved(self, lake_root: str) -> PipelineSpec:
        """This spec with relative `source`/`target` resolved under `lake_root` (absolute when
        local, see `resolve_location`)."""
        return self.model_copy(
            update={
                "source": resolve_location(self.source, lake_root),
                "target": resolve_location(self.target, lake_root),
            }
        )
