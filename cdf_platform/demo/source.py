"""A deterministic demo source: CDF-enabled bronze tables that receive insert, update and delete
batches, one Delta commit per batch.

The same seed, table and history always produce the same rows, so the demo and the tests can
state exact expectations.

Example:
    >>> write_demo_batch(spark, "/lake/bronze/orders", "orders", batch_size=100)  # doctest: +SKIP
    DemoBatch(table='orders', batch_index=0, version=0, inserted=100, updated=0, deleted=0)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.sql import create_table_sql, sql_path
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.tables import is_delta_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEMO_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
STATUSES = ("placed", "paid", "shipped", "delivered", "returned")
COUNTRIES = ("DE", "FR", "NL", "SE", "US", "JP", "BR")

# column name -> Spark SQL type, per demo table.
DEMO_SCHEMAS: dict[str, dict[str, str]] = {
    "customers": {
        "customer_id": "BIGINT",
        "name": "STRING",
        "email": "STRING",
        "country": "STRING",
        "updated_at": "TIMESTAMP",
    },
    "orders": {
        "order_id": "BIGINT",
        "customer_id": "BIGINT",
        "amount": "DECIMAL(12,2)",
        "status": "STRING",
        "updated_at": "TIMESTAMP",
    },
}
DEMO_KEYS = {"customers": "customer_id", "orders": "order_id"}


@dataclass(frozen=True)
class DemoBatch:
    """What one demo batch wrote."""

    table: str
    batch_index: int
    version: int
    inserted: int
    updated: int
    deleted: int


def _row(table: str, key: int, rng: random.Random, batch_index: int) -> dict[str, Any]:
    updated_at = DEMO_EPOCH + timedelta(minutes=batch_index)
    if table == "customers":
        return {
            "customer_id": key,
            "name": f"customer-{key}-{rng.randrange(10_000)}",
            "email": f"c{key}@example.com",
            "country": rng.choice(COUNTRIES),
            "updated_at": updated_at,
        }
    return {
        "order_id": key,
        "customer_id": rng.randrange(1, 1_000),
        "amount": f"{rng.randrange(100, 100_000) / 100:.2f}",
        "status": rng.choice(STATUSES),
        "updated_at": updated_at,
    }


def _latest_version(path: str) -> int:
    """Read from the log, without a Spark job."""
    return DeltaLog(path).latest_version()


def _live_keys(path: str, key: str) -> list[int]:
    """The table's current keys, read by deltalake without a Spark job."""
    from deltalake import DeltaTable, QueryBuilder

    table = QueryBuilder().register("t", DeltaTable(path)).execute(f'SELECT "{key}" FROM t')
    return sorted(int(value) for column in table.read_all().columns for value in column.to_pylist())


def write_demo_batch(
    spark: SparkSession, path: str, table: str, *, batch_size: int = 1_000, seed: int = 7
) -> DemoBatch:
    """Append one deterministic batch to the demo bronze table at `path` as a single commit.

    The first batch inserts `batch_size` rows. Each later batch updates ~60%, inserts ~30% and
    deletes ~10% of `batch_size` rows, drawn from the live keys with a RNG seeded by
    (seed, table, batch index).

    Raises:
        InvalidPipelineSpec: `table` is not a demo table or `batch_size` < 1.
    """
    if table not in DEMO_SCHEMAS:
        raise InvalidPipelineSpec(
            f"unknown demo table {table!r}", action=f"use one of {sorted(DEMO_SCHEMAS)}"
        )
    if batch_size < 1:
        raise InvalidPipelineSpec(f"batch_size must be >= 1, got {batch_size}")
    schema = DEMO_SCHEMAS[table]
    key = DEMO_KEYS[table]
    if not is_delta_table(path):
        spark.sql(create_table_sql(path, schema, {"delta.enableChangeDataFeed": "true"}))
    batch_index = _latest_version(path)  # version 0 is the CREATE TABLE
    rng = random.Random(f"{seed}:{table}:{batch_index}")
    live = _live_keys(path, key)
    next_key = (max(live) + 1) if live else 1

    if not live:
        n_update, n_delete, n_insert = 0, 0, batch_size
    else:
        n_update = min(len(live), batch_size * 6 // 10)
        n_delete = min(len(live) - n_update, batch_size // 10)
        n_insert = batch_size - n_update - n_delete
    touched = rng.sample(live, n_update + n_delete)
    updates, deletes = touched[:n_update], touched[n_update:]
    inserts = list(range(next_key, next_key + n_insert))

    rows = [dict(_row(table, k, rng, batch_index), _op="U") for k in updates]
    rows += [dict(_row(table, k, rng, batch_index), _op="I") for k in inserts]
    rows += [dict(_row(table, k, rng, batch_index), _op="D") for k in deletes]
    columns = [*schema, "_op"]
    ddl = ", ".join([*(f"`{c}` {t}" for c, t in schema.items()), "`_op` STRING"])
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    frame = spark.createDataFrame(
        [tuple(r[c] for c in columns) for r in rows],
        schema=ddl.replace("DECIMAL(12,2)", "STRING"),
    )
    if "amount" in schema:
        frame = frame.withColumn("amount", F.col("amount").cast("decimal(12,2)"))
    view = f"cdf_demo_batch_{table}"
    frame.createOrReplaceTempView(view)
    set_clause = ", ".join(f"t.`{c}` = s.`{c}`" for c in schema if c != key)
    insert_cols = ", ".join(f"`{c}`" for c in schema)
    insert_vals = ", ".join(f"s.`{c}`" for c in schema)
    spark.sql(
        f"""
        MERGE INTO {sql_path(path)} AS t
        USING {view} AS s
        ON t.`{key}` = s.`{key}`
        WHEN MATCHED AND s._op = 'D' THEN DELETE
        WHEN MATCHED AND s._op = 'U' THEN UPDATE SET {set_clause}
        WHEN NOT MATCHED AND s._op = 'I' THEN INSERT ({insert_cols}) VALUES ({insert_vals})
        """
    )
    spark.catalog.dropTempView(view)
    return DemoBatch(
        table=table,
        batch_index=batch_index,
        version=_latest_version(path),
        inserted=n_insert,
        updated=n_update,
        deleted=n_delete,
    )
