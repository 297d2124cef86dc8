"""Bronze `orders` tables for tests and benchmarks: deterministic change batches, one Delta commit
each, written by `deltalake` without a JVM (a batch commits in milliseconds).

The first batch inserts; each later one updates, inserts and deletes rows drawn from the live
keys, so the change feed holds every kind of change. The same seed and table history always
give the same rows: a test states exact expectations, and a benchmark's workload is the same
from run to run. They are the rows the demo's `orders` batches have
(`cdf_platform.demo.data.source`), so figures measured with either compare: both write through
`cdf_platform.services.keyed_batches`, and the kit keeps its own `orders` row because the
product's demo is no part of the test kit.

Example:
    >>> write_orders_batch("/lake/bronze/orders", batch_size=100)  # doctest: +SKIP
    BatchCounts(batch_index=0, version=1, inserted=100, updated=0, deleted=0)
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.services.keyed_batches import BatchCounts, write_keyed_batch

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


# What one batch wrote: its index (0 for the first), the commit version and its counts.
OrdersBatch = BatchCounts


def _row(key: int, rng: random.Random, batch_index: int) -> dict[str, Any]:
    return {
        "order_id": key,
        "customer_id": rng.randrange(1, 1_000),
        "amount": f"{rng.randrange(100, 100_000) / 100:.2f}",
        "status": rng.choice(STATUSES),
        "updated_at": EPOCH + timedelta(minutes=batch_index),
    }


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
    return write_keyed_batch(
        path,
        "orders",
        ORDERS_SCHEMA,
        ORDERS_KEY,
        _row,
        batch_size=batch_size,
        seed=seed,
        storage=storage,
    )
