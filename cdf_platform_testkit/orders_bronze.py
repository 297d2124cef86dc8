"""Bronze `orders` tables for tests and benchmarks: deterministic change batches, one Delta commit
each, written by `deltalake` without a JVM (a batch commits in milliseconds).

The first batch inserts; each later one updates, inserts and deletes rows drawn from the live
keys, so the change feed holds every kind of change. The same seed and table history always
give the same rows: a test states exact expectations, and a benchmark's workload is the same
from run to run. They are the rows the demo's `orders` batches have
(`cdf_platform.demo.data.source`), so figures measured with either compare; the kit has its own
builder because the product's demo is no part of the test kit.

Example:
    >>> write_orders_batch("/lake/bronze/orders", batch_size=100)  # doctest: +SKIP
    OrdersBatch(batch_index=0, version=1, inserted=100, updated=0, deleted=0)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.arrow_rows import arrow_table, delta_schema
from cdf_platform.deltalog.delta_tables import create_delta_table, open_delta_table
from cdf_platform.deltalog.tables import is_delta_table

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
STATUSES = ("placed", "paid", "shipped", "delivered", "returned")
# column name -> Delta type.
ORDERS_SCHEMA: dict[str, str] = {
    "order_id": "long",
    "customer_id": "long",
    "amount": "decimal(12,2)",
    "status": "string",
    "updated_at": "timestamp",
}
ORDERS_KEY = "order_id"


@dataclass(frozen=True)
class OrdersBatch:
    """What one batch wrote: its index (0 for the first), the commit version and its counts."""

    batch_index: int
    version: int
    inserted: int
    updated: int
    deleted: int


def _row(key: int, rng: random.Random, batch_index: int) -> dict[str, Any]:
    return {
        "order_id": key,
        "customer_id": rng.randrange(1, 1_000),
        "amount": f"{rng.randrange(100, 100_000) / 100:.2f}",
        "status": rng.choice(STATUSES),
        "updated_at": EPOCH + timedelta(minutes=batch_index),
    }


def _live_keys(bronze: Any) -> list[int]:
    """The current keys of the deltalake table `bronze`, read without a Spark job."""
    from deltalake import QueryBuilder

    query = f'SELECT "{ORDERS_KEY}" FROM t'
    table = QueryBuilder().register("t", bronze).execute(query)
    return sorted(int(value) for column in table.read_all().columns for value in column.to_pylist())


def write_orders_batch(
    path: str,
    *,
    batch_size: int = 1_000,
    seed: int = 7,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> OrdersBatch:
    """Append one deterministic batch to the `orders` bronze table at `path` as a single commit
    (creating the table, change feed on, first), with the object-store options `storage`.

    The first batch inserts `batch_size` rows. Each later batch updates ~60%, inserts ~30% and
    deletes ~10% of `batch_size` rows, drawn from the live keys with a RNG seeded by
    (seed, table, batch index). The batch is one MERGE: it commits whole or not at all.

    Raises:
        ValueError: `batch_size` < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not is_delta_table(path, storage):
        configuration = {"delta.enableChangeDataFeed": "true"}
        create_delta_table(
            path, storage, delta_schema(ORDERS_SCHEMA), mode="ignore", configuration=configuration
        )
    bronze = open_delta_table(path, storage)
    batch_index = bronze.version()  # version 0 is the CREATE TABLE
    rng = random.Random(f"{seed}:orders:{batch_index}")
    live = _live_keys(bronze)
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

    rows = [dict(_row(k, rng, batch_index), _op="U") for k in updates]
    rows += [dict(_row(k, rng, batch_index), _op="I") for k in inserts]
    rows += [dict(_row(k, rng, batch_index), _op="D") for k in deletes]
    values = {column: f"s.`{column}`" for column in ORDERS_SCHEMA}
    (
        bronze.merge(
            arrow_table({**ORDERS_SCHEMA, "_op": "string"}, rows),
            f"t.`{ORDERS_KEY}` = s.`{ORDERS_KEY}`",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_delete("s._op = 'D'")
        .when_matched_update({c: v for c, v in values.items() if c != ORDERS_KEY}, "s._op = 'U'")
        .when_not_matched_insert(values, "s._op = 'I'")
        .execute()
    )
    return OrdersBatch(
        batch_index=batch_index,
        version=bronze.version(),  # the handle follows its own commit
        inserted=n_insert,
        updated=n_update,
        deleted=n_delete,
    )
