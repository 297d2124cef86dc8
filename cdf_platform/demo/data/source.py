"""A deterministic demo source: CDF-enabled bronze tables that receive insert, update and delete
batches, one Delta commit per batch.

The same seed, table and history always produce the same rows, so the demo and the tests can
state exact expectations. The batches are written by `deltalake` (delta-rs), without a JVM, like
an ingestion service outside Spark would land them: a batch commits in milliseconds where a
Spark MERGE of a few hundred rows takes over a second, and the platform reads the change feed
of any Delta writer (its `_change_data` files and commits follow the protocol).

Example:
    >>> write_demo_batch("/lake/bronze/orders", "orders", batch_size=100)  # doctest: +SKIP
    DemoBatch(table='orders', batch_index=0, version=1, inserted=100, updated=0, deleted=0)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.arrow_rows import arrow_table, delta_schema
from cdf_platform.deltalog.delta_tables import create_delta_table, open_delta_table
from cdf_platform.deltalog.tables import is_delta_table

DEMO_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
STATUSES = ("placed", "paid", "shipped", "delivered", "returned")
COUNTRIES = ("DE", "FR", "NL", "SE", "US", "JP", "BR")

# column name -> Delta type, per demo table.
DEMO_SCHEMAS: dict[str, dict[str, str]] = {
    "customers": {
        "customer_id": "long",
        "name": "string",
        "email": "string",
        "country": "string",
        "updated_at": "timestamp",
    },
    "orders": {
        "order_id": "long",
        "customer_id": "long",
        "amount": "decimal(12,2)",
        "status": "string",
        "updated_at": "timestamp",
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

    def metadata(self) -> dict[str, int]:
        """The figures a bronze materialization records."""
        return {
            "version": self.version,
            "rows_inserted": self.inserted,
            "rows_updated": self.updated,
            "rows_deleted": self.deleted,
        }


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


def _live_keys(bronze: Any, key: str) -> list[int]:
    """The current keys of the deltalake table `bronze`, read without a Spark job."""
    from deltalake import QueryBuilder

    table = QueryBuilder().register("t", bronze).execute(f'SELECT "{key}" FROM t')
    return sorted(int(value) for column in table.read_all().columns for value in column.to_pylist())


def write_demo_batch(
    path: str,
    table: str,
    *,
    batch_size: int = 1_000,
    seed: int = 7,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> DemoBatch:
    """Append one deterministic batch to the demo bronze table at `path` as a single commit
    (creating the table, CDF on, first), with the lake's object-store options `storage`.

    The first batch inserts `batch_size` rows. Each later batch updates ~60%, inserts ~30% and
    deletes ~10% of `batch_size` rows, drawn from the live keys with a RNG seeded by
    (seed, table, batch index). The batch is one MERGE: it commits whole or not at all.

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
    if not is_delta_table(path, storage):
        configuration = {"delta.enableChangeDataFeed": "true"}
        create_delta_table(
            path, storage, delta_schema(schema), mode="ignore", configuration=configuration
        )
    bronze = open_delta_table(path, storage)
    batch_index = bronze.version()  # version 0 is the CREATE TABLE
    rng = random.Random(f"{seed}:{table}:{batch_index}")
    live = _live_keys(bronze, key)
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
    values = {column: f"s.`{column}`" for column in schema}
    (
        bronze.merge(
            arrow_table({**schema, "_op": "string"}, rows),
            f"t.`{key}` = s.`{key}`",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_delete("s._op = 'D'")
        .when_matched_update({c: v for c, v in values.items() if c != key}, "s._op = 'U'")
        .when_not_matched_insert(values, "s._op = 'I'")
        .execute()
    )
    return DemoBatch(
        table=table,
        batch_index=batch_index,
        version=bronze.version(),  # the handle follows its own commit
        inserted=n_insert,
        updated=n_update,
        deleted=n_delete,
    )
