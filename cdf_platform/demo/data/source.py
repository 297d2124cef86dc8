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
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.services.keyed_batches import write_keyed_batch

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
    counts = write_keyed_batch(
        path,
        table,
        DEMO_SCHEMAS[table],
        DEMO_KEYS[table],
        partial(_row, table),
        batch_size=batch_size,
        seed=seed,
        storage=storage,
    )
    return DemoBatch(table, **asdict(counts))
