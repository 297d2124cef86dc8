"""The bad-input catalogue: each input the platform must refuse, the error class it raises, and
the fix its message names. One row per case; `test_bad_input.py` runs every row and docs/testing.md
lists them (`python -m cdf_platform_tests.faults.catalogue` prints the Markdown table).

Every case is refused before anything is written: silver stays absent or unchanged and the
watermark does not move.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from arro3.core import Array, DataType, Table
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from cdf_platform.core.errors import (
    FIX_SPEC_FIELD,
    CatalogManagedSource,
    CdfNotEnabled,
    CdfPlatformError,
    DataQualityError,
    EngineUnavailable,
    InvalidPipelineSpec,
    InvalidStorageConfig,
    SourceLogDamaged,
    SourceNotFound,
    TargetOwnershipConflict,
    UnsafeSparkConfig,
)
from cdf_platform.core.lake import Lake
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import find_spec, load_specs
from cdf_platform.planning.run_result import RunResult
from cdf_platform.run import PipelineRunner
from cdf_platform.services.service import free_port
from cdf_platform.spark.runtime.session import build_spark_session
from cdf_platform.spark.runtime.session_conf import SparkSettings
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import OWNER_PROPERTY
from cdf_platform_testkit.faults.bronze_model import CDF, BronzeTable, arrow_table

PIPELINE_ID = "people"
VALID: dict[str, Any] = {"id": PIPELINE_ID, "source": "bronze", "target": "silver", "keys": ["id"]}
ROWS = [{"id": 1, "name": "ada", "amount": 10}, {"id": 2, "name": "bob", "amount": 20}]
TRANSFORMS = "cdf_platform_testkit.transforms"


class BadInputLake:
    """A lake for one case: the pipelines file, bronze, silver and control tables, and the Spark
    session when the case needs one (None: the case must be refused without starting Spark)."""

    def __init__(self, root: Path, spark: SparkSession | None) -> None:
        self.root = root
        self.spark = spark
        self.pipelines = root / "pipelines.yaml"
        self.bronze = str(root / "bronze")
        self.silver = str(root / "silver")
        self.control = ControlTable(str(root / "_control"))

    def write_pipelines(self, document: Any) -> Path:
        """Write the pipelines file (a string is written as is, anything else as YAML)."""
        text = document if isinstance(document, str) else yaml.safe_dump(document)
        self.pipelines.write_text(text)
        return self.pipelines

    def load(self, *pipelines: dict[str, Any]) -> list[PipelineSpec]:
        """Write `pipelines` and load them the way the CLI does."""
        self.write_pipelines({"pipelines": list(pipelines)})
        return load_specs(self.pipelines, lake_root=str(self.root))

    def spec(self, **overrides: Any) -> PipelineSpec:
        """The valid pipeline with `overrides`, loaded from the pipelines file."""
        return self.load({**VALID, **overrides})[0]

    def spark_factory(self) -> SparkSession:
        """The session for runs; refuses to start Spark for JVM-free cases."""
        if self.spark is None:
            raise AssertionError("this input must be refused before Spark starts")
        return self.spark

    def run(self, spec: PipelineSpec | None = None) -> RunResult:
        """One run of `spec` (default: the valid pipeline)."""
        spec = spec or self.spec()
        return PipelineRunner.on(self.control, self.spark_factory).run(spec)

    def make_bronze(self, rows: list[dict[str, Any]] = ROWS, *, cdf: bool = True) -> BronzeTable:
        """Bronze (id, name, amount) with `rows`, written with delta-rs."""
        if cdf:
            return BronzeTable.create(self.bronze, rows)
        write_deltalake(self.bronze, arrow_table(["id", "name", "amount"], rows))
        return BronzeTable(self.bronze, ["id", "name", "amount"], {})


class _UnsafeSessions:
    """Stands in for a SparkSession whose sessions ignore missing files (a cluster default)."""

    def __init__(self, spark: SparkSession, key: str) -> None:
        self._spark = spark
        self._key = key

    def newSession(self) -> SparkSession:  # noqa: N802 (the SparkSession method name)
        session = self._spark.newSession()
        session.conf.set(self._key, "true")
        return session


def _nothing(lake: BadInputLake) -> None:
    """No setup."""


@dataclass(frozen=True)
class BadInput:
    """One row of the catalogue.

    Attributes:
        case: test id.
        given: the input, as docs/testing.md shows it.
        error: the error class the platform raises.
        fix: what the message must name as the fix (after "What to do:").
        act: the action that must fail.
        setup: what exists before (bronze, a loaded silver), done before the "nothing written"
            snapshot.
        spark: the case needs a SparkSession (otherwise it is refused before Spark starts).
    """

    case: str
    given: str
    error: type[CdfPlatformError]
    fix: str
    act: Callable[[BadInputLake], object]
    setup: Callable[[BadInputLake], object] = field(default=_nothing)
    spark: bool = False


def _spec_case(case: str, given: str, **overrides: Any) -> BadInput:
    """An invalid field in an otherwise valid pipelines file (bronze exists)."""
    return BadInput(
        case,
        given,
        InvalidPipelineSpec,
        FIX_SPEC_FIELD,
        act=lambda lake: lake.spec(**overrides),
        setup=lambda lake: lake.make_bronze(),
    )


def _transform_case(case: str, given: str, **overrides: Any) -> BadInput:
    """A transform refused on Spark's analysed plan before anything is read or written."""
    return BadInput(
        case,
        given,
        InvalidPipelineSpec,
        FIX_SPEC_FIELD,
        act=lambda lake: lake.run(lake.spec(**overrides)),
        setup=lambda lake: lake.make_bronze(),
        spark=True,
    )


def _file_case(case: str, given: str, text: str, fix: str) -> BadInput:
    """A pipelines file whose content is wrong as a whole."""

    def act(lake: BadInputLake) -> object:
        lake.write_pipelines(text)
        return load_specs(lake.pipelines, lake_root=str(lake.root))

    return BadInput(case, given, InvalidPipelineSpec, fix, act=act)


def _storage_case(case: str, given: str, storage: dict[str, Any], fix: str) -> BadInput:
    """A pipelines file whose `storage:` section is wrong: refused when the lake is loaded, as
    the command line does when it reads the file."""

    def act(lake: BadInputLake) -> object:
        lake.write_pipelines({"pipelines": [VALID], "storage": storage})
        load_specs(lake.pipelines, lake_root=str(lake.root))
        return Lake.load(lake_root=str(lake.root), pipelines_file=str(lake.pipelines))

    return BadInput(case, given, InvalidStorageConfig, fix, act=act)


def _missing_file(lake: BadInputLake) -> object:
    return load_specs(lake.root / "nowhere.yaml", lake_root=str(lake.root))


def _unknown_pipeline(lake: BadInputLake) -> object:
    return find_spec(lake.load(VALID), "customers")


def _not_delta(lake: BadInputLake) -> None:
    os.makedirs(lake.bronze)
    (Path(lake.bronze) / "part-0000.parquet").write_bytes(b"PAR1 not really")


def _catalog_managed(lake: BadInputLake) -> None:
    """Bronze upgraded to a catalog-managed table (the protocol commit such a table carries)."""
    lake.make_bronze()
    log = Path(lake.bronze, "_delta_log")
    version = 1 + max(int(p.name.split(".")[0]) for p in log.glob("*.json"))
    (log / f"{version:020d}.json").write_text(
        '{"commitInfo":{"operation":"UPGRADE PROTOCOL","inCommitTimestamp":1}}\n'
        '{"protocol":{"minReaderVersion":3,"minWriterVersion":7,'
        '"readerFeatures":["catalogManaged"],'
        '"writerFeatures":["catalogManaged","inCommitTimestamp"]}}\n'
    )


def _damaged_log(lake: BadInputLake) -> None:
    """Bronze written by delta-rs (no checksums), a commit of it deleted, no checkpoint after."""
    bronze = lake.make_bronze()  # 0
    bronze.insert([{"id": 3, "name": "cy", "amount": 30}])  # 1, deleted below
    bronze.insert([{"id": 4, "name": "dee", "amount": 40}])  # 2
    log = Path(lake.bronze, "_delta_log")
    commits = sorted(log.glob("*.json"))
    assert len(commits) >= 3 and not list(log.glob("*.crc")) and not list(log.glob("*.parquet"))
    commits[-2].unlink()


def _cut_commit(lake: BadInputLake) -> None:
    """Bronze whose newest commit file was cut short (a copy or a restore that stopped)."""
    bronze = lake.make_bronze()  # 0
    bronze.insert([{"id": 3, "name": "cy", "amount": 30}])  # 1
    newest = sorted(Path(lake.bronze, "_delta_log").glob("*.json"))[-1]
    newest.write_bytes(newest.read_bytes()[:40])


def _files_at_target(lake: BadInputLake) -> None:
    lake.make_bronze()
    os.makedirs(lake.silver)
    (Path(lake.silver) / "orders.csv").write_text("id,name\n1,ada\n")


def _foreign_silver(owner: str | None) -> Callable[[BadInputLake], None]:
    def setup(lake: BadInputLake) -> None:
        lake.make_bronze()
        properties = {CDF: "true"} if owner is None else {CDF: "true", OWNER_PROPERTY: owner}
        schema = arrow_table(["id", "name", "amount"], []).schema
        DeltaTable.create(
            lake.silver, schema, configuration=properties, raise_if_key_not_exists=False
        )

    return setup


def _bronze_with_null_key(lake: BadInputLake) -> None:
    lake.make_bronze([*ROWS, {"id": None, "name": "nobody", "amount": 0}])


def _bronze_with_duplicate_keys(lake: BadInputLake) -> None:
    twins = [{"id": 7, "name": "twin-a", "amount": 1}, {"id": 7, "name": "twin-b", "amount": 2}]
    lake.make_bronze([*ROWS, *twins])


# An event log of flat events (`op` beside the row) and the pipeline reading it.
EVENTS: dict[str, Any] = {
    "changes": "events",
    "sequence_by": "seq",
    "events": {"operation": "op", "upserts": ["c", "u"], "deletes": ["d"]},
    "exclude_columns": ["op"],
}


def _event_log(*events: tuple[int, str, int, str]) -> Callable[[BadInputLake], None]:
    """Bronze as an event log (id, name, amount, op, seq) holding one commit of `events`,
    each (id, name, seq, op)."""

    def setup(lake: BadInputLake) -> None:
        schema = pa.schema(
            [
                ("id", pa.int64()),
                ("name", pa.string()),
                ("amount", pa.int64()),
                ("op", pa.string()),
                ("seq", pa.int64()),
            ]
        )
        rows = [{"id": i, "name": n, "amount": 1, "op": o, "seq": q} for i, n, q, o in events]
        table = pa.Table.from_pylist(rows, schema=schema)
        write_deltalake(lake.bronze, table, configuration={CDF: "true"})

    return setup


def _unsafe(key: str) -> Callable[[BadInputLake], object]:
    def act(lake: BadInputLake) -> object:
        assert lake.spark is not None
        sessions: Any = _UnsafeSessions(lake.spark, key)
        return PipelineRunner.on(lake.control, lambda: sessions).run(lake.spec())

    return act


def _bronze_with_column(column: str) -> Callable[[BadInputLake], None]:
    """Bronze whose schema has `column` next to the key (delta-rs lets it have CDF on)."""

    def setup(lake: BadInputLake) -> None:
        table = Table.from_pydict(
            {"id": Array([1, 2], DataType.int64()), column: Array([5, 6], DataType.int64())}
        )
        write_deltalake(lake.bronze, table, configuration={CDF: "true"})

    return setup


def _remote_nobody_listens(lake: BadInputLake) -> RunResult:
    """A run whose Spark is a Spark Connect URL on a free loopback port: refused before any
    session exists (so this process never turns into a Connect client)."""
    settings = SparkSettings(remote=f"sc://127.0.0.1:{free_port()}")
    return PipelineRunner.on(lake.control, lambda: build_spark_session(settings)).run(lake.spec())


def _fresh_schema(lake: BadInputLake) -> str:
    """A new schema in the session's catalog (which outlives one case)."""
    assert lake.spark is not None
    schema = f"s_{uuid.uuid4().hex[:8]}"
    lake.spark.sql(f"CREATE SCHEMA {schema}")
    return schema


def _unknown_source_name(lake: BadInputLake) -> RunResult:
    return lake.run(lake.spec(source=f"{_fresh_schema(lake)}.people"))


def _parquet_source_name(lake: BadInputLake) -> RunResult:
    assert lake.spark is not None
    name = f"{_fresh_schema(lake)}.people"
    lake.spark.sql(f"CREATE TABLE {name} (id BIGINT) USING PARQUET")
    return lake.run(lake.spec(source=name))


CATALOGUE: list[BadInput] = [
    _file_case(
        "empty_file",
        "empty pipelines file",
        "",
        "start the file with `pipelines:`",
    ),
    BadInput(
        "missing_file",
        "pipelines file does not exist",
        InvalidPipelineSpec,
        "point $CDF_PIPELINES_FILE at your pipelines file",
        act=_missing_file,
    ),
    _file_case(
        "not_yaml",
        "pipelines file is not YAML",
        "pipelines:\n  - id: people\n   keys: [id\n",
        "fix the YAML syntax at the line shown",
    ),
    _file_case(
        "not_a_mapping",
        "YAML without a `pipelines:` list (a bare list)",
        "- id: people\n  keys: [id]\n",
        "start the file with `pipelines:`",
    ),
    _file_case(
        "unknown_top_level_key",
        "unknown top-level key (`defaults:`)",
        yaml.safe_dump({"pipelines": [VALID], "defaults": {"delete_mode": "soft"}}),
        "fix the named field in the pipelines file",
    ),
    _storage_case(
        "storage_unknown_option",
        "unknown storage option (`storage: {s3://lake: {endpont: ...}}`)",
        {"s3://lake": {"endpont": "https://minio.internal:9000"}},
        "fix the named entry of `storage:` in the pipelines file",
    ),
    _storage_case(
        "storage_unknown_scheme",
        "storage prefix of no object store (`hdfs://nn/lake`)",
        {"hdfs://nn/lake": {"endpoint": "https://nn:9000"}},
        "write the prefix as an object-store URI",
    ),
    _storage_case(
        "storage_variable_unset",
        "storage option read from a variable that is not set (`{env: CDF_TEST_UNSET}`)",
        {"s3://lake": {"secret_access_key": {"env": "CDF_TEST_UNSET"}}},
        "set CDF_TEST_UNSET in the environment",
    ),
    _file_case(
        "pipeline_not_a_mapping",
        "a pipeline entry that is not a mapping (`- people`)",
        "pipelines:\n  - people\n",
        FIX_SPEC_FIELD,
    ),
    _spec_case("unknown_field", "misspelt field (`delete_mod: soft`)", delete_mod="soft"),
    _spec_case("unknown_delete_mode", "`delete_mode: sometimes`", delete_mode="sometimes"),
    _spec_case("unknown_fallback_mode", "`fallback_mode: RETRY`", fallback_mode="RETRY"),
    _spec_case("negative_lag", "`max_allowed_lag_hours: -1`", max_allowed_lag_hours=-1),
    _spec_case("negative_headroom", "`min_headroom_hours: -5`", min_headroom_hours=-5),
    _spec_case("lag_not_a_number", "`max_allowed_lag_hours: a day`", max_allowed_lag_hours="a day"),
    _spec_case("sql_in_pipeline_id", "`id: people; DROP TABLE x`", id="people; DROP TABLE x"),
    _spec_case(
        "sql_in_key", "a key with SQL in it (`` id` = 1; DROP -- ``)", keys=["id` = 1; DROP --"]
    ),
    _spec_case("sql_in_source", "a source with SQL in it (`` b`; DROP x ``)", source="b`; DROP x"),
    _spec_case(
        "sql_in_include_column",
        "an include column with SQL in it (`n) --`)",
        include_columns=["n) --"],
    ),
    _spec_case("uppercase_pipeline_id", "`id: People-1`", id="People-1"),
    _spec_case("empty_keys", "`keys: []`", keys=[]),
    _spec_case("reserved_key", "key named `_is_deleted` (a silver column)", keys=["_is_deleted"]),
    _spec_case(
        "reserved_cdf_column",
        "include column `_commit_version` (a change-feed column)",
        include_columns=["_commit_version"],
    ),
    _spec_case("key_excluded", "a key listed in `exclude_columns`", exclude_columns=["id"]),
    _spec_case(
        "scd2_soft_delete",
        "`history: scd2` with `delete_mode: soft`",
        history="scd2",
        delete_mode="soft",
    ),
    _spec_case(
        "tracked_columns_without_scd2",
        "`track_history_columns: [name]` without `history: scd2`",
        track_history_columns=["name"],
    ),
    _spec_case("derived_key", "`columns: {id: id + 1}` deriving a key", columns={"id": "id + 1"}),
    _spec_case("source_is_target", "`source` and `target` the same table", target="bronze"),
    BadInput(
        "duplicate_pipeline_ids",
        "two pipelines with the same `id`",
        InvalidPipelineSpec,
        "fix the named field in the pipelines file",
        act=lambda lake: lake.load(VALID, {**VALID, "target": "silver2"}),
    ),
    BadInput(
        "two_pipelines_one_target",
        "two pipelines writing the same `target`",
        TargetOwnershipConflict,
        "give each pipeline its own `target`",
        act=lambda lake: lake.load(VALID, {**VALID, "id": "people2"}),
    ),
    BadInput(
        "unknown_pipeline_id",
        "`cdf-platform run customers` with no such pipeline",
        InvalidPipelineSpec,
        "use one of the ids in the pipelines file",
        act=_unknown_pipeline,
    ),
    BadInput(
        "source_missing",
        "`source` path does not exist",
        SourceNotFound,
        "check the `source` path or table name",
        act=lambda lake: lake.run(),
    ),
    BadInput(
        "source_not_delta",
        "`source` is a folder of Parquet files, not a Delta table",
        SourceNotFound,
        "check the `source` path or table name",
        act=lambda lake: lake.run(),
        setup=_not_delta,
    ),
    BadInput(
        "source_catalog_managed",
        "bronze whose protocol has the `catalogManaged` feature",
        CatalogManagedSource,
        "point `source` at a path-based Delta table",
        act=lambda lake: lake.run(),
        setup=_catalog_managed,
    ),
    BadInput(
        "source_log_damaged",
        "bronze whose `_delta_log` lost a commit no checkpoint or checksum covers",
        SourceLogDamaged,
        "restore the missing commit files of the source's _delta_log",
        act=lambda lake: lake.run(),
        setup=_damaged_log,
    ),
    BadInput(
        "source_commit_cut_short",
        "bronze whose newest commit file was cut short",
        SourceLogDamaged,
        "restore commit 1 of the table's _delta_log from a backup",
        act=lambda lake: lake.run(),
        setup=_cut_commit,
    ),
    BadInput(
        "cdf_never_enabled",
        "bronze without `delta.enableChangeDataFeed`",
        CdfNotEnabled,
        "SET TBLPROPERTIES (delta.enableChangeDataFeed = true)",
        act=lambda lake: lake.run(),
        setup=lambda lake: lake.make_bronze(cdf=False),
    ),
    BadInput(
        "target_owned_by_other_pipeline",
        "`target` is silver of another pipeline",
        TargetOwnershipConflict,
        "give each pipeline its own `target`",
        act=lambda lake: lake.run(),
        setup=_foreign_silver("orders"),
    ),
    BadInput(
        "target_not_from_platform",
        "`target` is a Delta table the platform did not create",
        TargetOwnershipConflict,
        "give each pipeline its own `target`",
        act=lambda lake: lake.run(),
        setup=_foreign_silver(None),
    ),
    BadInput(
        "target_holds_other_files",
        "`target` is a folder of files that is not a Delta table",
        TargetOwnershipConflict,
        "point `target` at a new or empty location",
        act=lambda lake: lake.run(),
        setup=_files_at_target,
    ),
    BadInput(
        "key_not_in_source",
        "`keys: [customer_id]`, not a bronze column",
        InvalidPipelineSpec,
        "fix `keys` / `include_columns` in the pipelines file",
        act=lambda lake: lake.run(lake.spec(keys=["customer_id"])),
        setup=lambda lake: lake.make_bronze(),
        spark=True,
    ),
    BadInput(
        "include_column_not_in_source",
        "`include_columns: [email]`, not a bronze column",
        InvalidPipelineSpec,
        "fix `keys` / `include_columns` in the pipelines file",
        act=lambda lake: lake.run(lake.spec(include_columns=["email"])),
        setup=lambda lake: lake.make_bronze(),
        spark=True,
    ),
    _transform_case(
        "transform_aggregation",
        "`transform:` a Python function that aggregates (`groupBy(...).agg(...)`)",
        transform=f"{TRANSFORMS}:total_per_name",
    ),
    _transform_case(
        "transform_key_change",
        "`transform:` a Python function that changes the key (`id + 1`)",
        transform=f"{TRANSFORMS}:shift_key",
    ),
    _transform_case(
        "derived_nondeterministic",
        "`columns: {lucky: rand()}` (non-deterministic)",
        columns={"lucky": "rand()"},
    ),
    _transform_case(
        "derived_unknown_column",
        "`columns: {usd: amout * 2}` (no column `amout`)",
        columns={"usd": "amout * 2"},
    ),
    _transform_case(
        "derived_syntax_error",
        "`columns: {usd: amount +* 2}` (not Spark SQL)",
        columns={"usd": "amount +* 2"},
    ),
    _spec_case(
        "expectation_unknown_action",
        "`expectations: [{name: positive, rule: amount > 0, action: skip}]`",
        expectations=[{"name": "positive", "rule": "amount > 0", "action": "skip"}],
    ),
    _spec_case(
        "expectation_duplicate_names",
        "two expectations named `positive`",
        expectations=[
            {"name": "positive", "rule": "amount > 0"},
            {"name": "positive", "rule": "amount >= 0", "action": "drop"},
        ],
    ),
    _spec_case(
        "expectation_bad_name",
        "`expectations: [{name: Amount OK, ...}]` (not a check name)",
        expectations=[{"name": "Amount OK", "rule": "amount > 0"}],
    ),
    _transform_case(
        "expectation_not_boolean",
        "`expectations: [{name: positive, rule: amount + 1}]` (not a condition)",
        expectations=[{"name": "positive", "rule": "amount + 1"}],
    ),
    _transform_case(
        "expectation_unknown_column",
        "`expectations: [{name: positive, rule: amout > 0}]` (no column `amout`)",
        expectations=[{"name": "positive", "rule": "amout > 0"}],
    ),
    BadInput(
        "expectation_fail_rule_failed",
        "a bronze row failing an expectation whose action is `fail`",
        DataQualityError,
        "change the rule's action to `quarantine`, `drop` or `warn`",
        act=lambda lake: lake.run(
            lake.spec(expectations=[{"name": "small", "rule": "amount < 15", "action": "fail"}])
        ),
        setup=lambda lake: lake.make_bronze(),
        spark=True,
    ),
    BadInput(
        "null_key",
        "a bronze row with a null key",
        DataQualityError,
        "fix the named key in the bronze table",
        act=lambda lake: lake.run(),
        setup=_bronze_with_null_key,
        spark=True,
    ),
    BadInput(
        "duplicate_keys_in_one_commit",
        "one bronze commit inserting two rows with the same key",
        DataQualityError,
        "remove the duplicate or null-key row",
        act=lambda lake: lake.run(),
        setup=_bronze_with_duplicate_keys,
        spark=True,
    ),
    _spec_case(
        "events_without_sequence_by",
        "`changes: events` without `sequence_by`",
        **{**EVENTS, "sequence_by": None},
    ),
    _spec_case(
        "events_without_operations",
        "`changes: events` without its `events:` block",
        **{**EVENTS, "events": None},
    ),
    _spec_case(
        "event_operation_both_upsert_and_delete",
        "`events: {upserts: [c, d], deletes: [d]}` (one value in both lists)",
        **{**EVENTS, "events": {"operation": "op", "upserts": ["c", "d"], "deletes": ["d"]}},
    ),
    _spec_case(
        "event_truncates_with_history",
        "`events: {truncates: [t]}` with `history: scd2`",
        **{
            **EVENTS,
            "history": "scd2",
            "events": {"operation": "op", "upserts": ["c"], "deletes": ["d"], "truncates": ["t"]},
        },
    ),
    BadInput(
        "events_tie_in_one_commit",
        "an event log commit holding two different events of one key with the same "
        "`sequence_by` value",
        DataQualityError,
        "give `sequence_by` a column that tells them apart",
        act=lambda lake: lake.run(lake.spec(**EVENTS)),
        setup=_event_log((1, "ada", 5, "c"), (1, "ada-2", 5, "u")),
        spark=True,
    ),
    BadInput(
        "events_unknown_operation",
        "an event whose operation (`op: x`) is in no list of `events`",
        DataQualityError,
        "add the operation value to `events.upserts`, `events.deletes` or `events.truncates`",
        act=lambda lake: lake.run(lake.spec(**EVENTS)),
        setup=_event_log((1, "ada", 5, "c"), (2, "bob", 6, "x")),
        spark=True,
    ),
    BadInput(
        "ignore_missing_files",
        "Spark session with `spark.sql.files.ignoreMissingFiles=true`",
        UnsafeSparkConfig,
        "unset spark.sql.files.ignoreMissingFiles",
        act=_unsafe("spark.sql.files.ignoreMissingFiles"),
        setup=lambda lake: lake.make_bronze(),
        spark=True,
    ),
    BadInput(
        "source_column_named_like_a_silver_column",
        "a bronze column named `_is_deleted` (silver adds that column)",
        InvalidPipelineSpec,
        "rename the bronze column",
        act=lambda lake: lake.run(lake.spec(delete_mode="soft")),
        setup=_bronze_with_column("_is_deleted"),
    ),
    BadInput(
        "source_column_named_like_a_cdf_column",
        "a bronze column named `_change_type` (the change feed adds that column)",
        InvalidPipelineSpec,
        "rename the bronze column",
        act=lambda lake: lake.run(),
        setup=_bronze_with_column("_change_type"),
    ),
    BadInput(
        "spark_connect_server_not_listening",
        "`CDF_SPARK_REMOTE=sc://127.0.0.1:PORT` where no Spark Connect server listens",
        EngineUnavailable,
        "check $CDF_SPARK_REMOTE and that the server runs",
        act=_remote_nobody_listens,
        setup=lambda lake: lake.make_bronze(),
    ),
    BadInput(
        "source_name_unknown",
        "`source: bronze.people`, a name the session's catalog does not have",
        SourceNotFound,
        "check the `source` name (schema.table or catalog.schema.table), and that the "
        "session's catalog is the one that holds it",
        act=_unknown_source_name,
        spark=True,
    ),
    BadInput(
        "source_name_not_delta",
        "`source: bronze.people` naming a Parquet table",
        SourceNotFound,
        "point `source` at a Delta table with the change feed on",
        act=_parquet_source_name,
        spark=True,
    ),
    BadInput(
        "target_schema_missing",
        "`target: no_such_schema.people`, a schema the catalog does not have",
        InvalidPipelineSpec,
        "create the schema (CREATE SCHEMA no_such_schema) or fix `target`",
        act=lambda lake: lake.run(lake.spec(target="no_such_schema.people")),
        setup=lambda lake: lake.make_bronze(),
        spark=True,
    ),
]


def readme_table() -> str:
    """The catalogue as a Markdown table (input, error, what to do)."""
    lines = ["| Input | Error | What to do (named in the message) |", "|---|---|---|"]
    for item in CATALOGUE:
        lines.append(f"| {item.given} | `{item.error.__name__}` | {item.fix} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(readme_table())
