"""Deterministic change batches for a keyed bronze table, one Delta commit each, written by
`deltalake` without a JVM: the mechanics the demo's source tables and the test kit's `orders`
tables share, so both write the same rows for the same seed and history.

The first batch inserts `batch_size` rows; each later one updates ~60%, inserts ~30% and
deletes ~10% of `batch_size` rows, drawn from the live keys with a RNG seeded by (seed, table
name, batch index). The batch is one MERGE: it commits whole or not at all.

Example:
    >>> def row(key, rng, batch_index):  # doctest: +SKIP
    ...     return {"id": key, "v": rng.randrange(10)}
    >>> write_keyed_batch("/lake/b", "b", {"id": "long", "v": "long"}, "id", row,
    ...     batch_size=10)  # doctest: +SKIP
    BatchCounts(batch_index=0, version=1, inserted=10, updated=0, deleted=0)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.arrow_rows import arrow_table, delta_schema
from cdf_platform.deltalog.delta_tables import create_delta_table, open_delta_table
from cdf_platform.deltalog.tables import is_delta_table

# A row of the table for a key: (key, the batch's RNG, the batch index) -> column values.
RowOf = Callable[[int, random.Random, int], dict[str, Any]]


@dataclass(frozen=True)
class BatchCounts:
    """What one batch wrote: its index (0 for the first), the commit version and its counts."""

    batch_index: int
    version: int
    inserted: int
    updated: int
    deleted: int


def _live_keys(bronze: Any, key: str) -> list[int]:
    """The current keys of the deltalake table `bronze`, read without a Spark job."""
    from deltalake import QueryBuilder

    table = QueryBuilder().register("t", bronze).execute(f'SELECT "{key}" FROM t')
    return sorted(int(value) for column in table.read_all().columns for value in column.to_pylist())


def write_keyed_batch(
    path: str,
    name: str,
    schema: Mapping[str, str],
    key: str,
    row_of: RowOf,
    *,
    batch_size: int,
    seed: int,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> BatchCounts:
    """Append one batch to the table `name` at `path` (`schema`: column -> Delta type, keyed by
    `key`; created with the change feed on first) as a single commit, with the object-store
    options `storage`; `batch_size` >= 1 (the callers check it with their own error)."""
    if not is_delta_table(path, storage):
        configuration = {"delta.enableChangeDataFeed": "true"}
        create_delta_table(
            path, storage, delta_schema(schema), mode="ignore", configuration=configuration
        )
    bronze = open_delta_table(path, storage)
    batch_index = bronze.version()  # version 0 is the CREATE TABLE
    rng = random.Random(f"{seed}:{name}:{batch_index}")
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

    rows = [dict(row_of(k, rng, batch_index), _op="U") for k in updates]
    rows += [dict(row_of(k, rng, batch_index), _op="I") for k in inserts]
    rows += [dict(row_of(k, rng, batch_index), _op="D") for k in deletes]
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
    return BatchCounts(
        batch_index=batch_index,
        version=bronze.version(),  # the handle follows its own commit
        inserted=n_insert,
        updated=n_update,
        deleted=n_delete,
    )
