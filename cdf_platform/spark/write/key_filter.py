"""A condition on silver's keys, implied by the incremental MERGE's join, that lets Delta skip
silver files a backlog does not reach.

Delta's MERGE finds the silver files that hold a changed key by joining the change set with
silver on the key columns; with nothing but `t.k = s.k` in the ON clause it reads the keys of
every silver file to do so. `key_filter` adds, per key column, the ranges that hold the change
set's values (at most `MAX_RANGES`, split at the widest gaps for integer keys; one range for
strings and dates). Delta's data skipping compares them with each file's min/max statistics, so a
backlog clustered in key ranges, over a silver laid out by key (as the first load writes it),
reads only the files of those ranges.

The condition is added only when silver's file statistics (read from the log, without Spark)
show it rules out at least one file: with a backlog spread over every file it would skip nothing,
and the bench measured such runs slower with it than without.

Every silver row whose key is in the change set satisfies the condition, so the MERGE matches
exactly the rows it matches without it (the incremental MERGE has no WHEN NOT MATCHED BY SOURCE
clause, the only kind of clause a target-side condition could change). Key columns of other types
(timestamps, decimals, floats, binary, non-binary collations) get no range.
`spark.cdf_platform.merge.keyFilter` set to `false` turns it off.

The changed keys themselves are not listed (`t.k IN (...)`): Spark would parse and analyse every
listed value in each run's SQL.

Example:
    >>> key_filter(spark, "/lake/silver/orders", per_commit_changes, ["id"])  # doctest: +SKIP
    '(t.`id` BETWEEN 3 AND 90 OR t.`id` BETWEEN 4000 AND 4100)'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from cdf_platform.core.sql import quote_ident, sql_string
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.spark.runtime.session import switched_on

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType

ENABLED_CONF = "spark.cdf_platform.merge.keyFilter"
# Up to this many change rows are fetched to place the ranges; beyond it each key column gets
# one range, its minimum to its maximum.
MAX_COLLECTED_KEYS = 20_000
# Ranges per integer key column: enough for a backlog clustered in a few places, few enough for
# data skipping to evaluate cheaply on every file.
MAX_RANGES = 16


def _literal_kind(data_type: DataType) -> str | None:
    """How values of `data_type` are written as SQL literals: "int", "string", "date" or None."""
    from pyspark.sql.types import DateType, IntegralType, StringType

    if isinstance(data_type, IntegralType):
        return "int"
    if isinstance(data_type, StringType):
        # Python orders strings as Spark's binary collation does, not as the others do.
        return "string" if getattr(data_type, "collation", "UTF8_BINARY") == "UTF8_BINARY" else None
    if isinstance(data_type, DateType):
        return "date"
    return None


def _literal(kind: str, value: object) -> str:
    if kind == "int":
        assert isinstance(value, int)
        return str(value)
    if kind == "string":
        return sql_string(str(value))
    assert isinstance(value, dt.date)
    return f"DATE'{value.isoformat()}'"


def integer_ranges(values: Sequence[int], most: int = MAX_RANGES) -> list[tuple[int, int]]:
    """Sorted distinct `values` as at most `most` (low, high) ranges, split at the widest gaps
    (consecutive values are never split).

    Example:
        >>> integer_ranges([1, 2, 3, 100, 101, 7], most=2)
        [(1, 7), (100, 101)]
    """
    ordered = sorted(set(values))
    if not ordered:
        return []
    holes = [i for i in range(1, len(ordered)) if ordered[i] - ordered[i - 1] > 1]
    gaps = sorted(holes, key=lambda i: ordered[i] - ordered[i - 1], reverse=True)
    cuts = sorted(gaps[: max(most - 1, 0)])
    bounds = [0, *cuts, len(ordered)]
    return [(ordered[lo], ordered[hi - 1]) for lo, hi in pairwise(bounds)]


@dataclass(frozen=True)
class KeyRanges:
    """The ranges (low, high, both included) that hold a change set's values of one key column,
    with how its values are written in SQL ("int", "string" or "date")."""

    column: str
    kind: str
    ranges: tuple[tuple[Any, Any], ...]

    def sql(self) -> str:
        """The condition on silver alias `t`."""
        ref = f"t.{quote_ident(self.column)}"
        between = " OR ".join(
            f"{ref} BETWEEN {_literal(self.kind, lo)} AND {_literal(self.kind, hi)}"
            for lo, hi in self.ranges
        )
        return f"({between})"

    def overlaps(self, low: Any, high: Any) -> bool:
        """Whether a file whose statistics say [low, high] may hold a value in the ranges
        (statistics missing: it may)."""
        if low is None or high is None:
            return True
        return any(lo <= high and hi >= low for lo, hi in self.ranges)


def key_ranges(
    changes: DataFrame, keys: Sequence[str], most_collected: int = MAX_COLLECTED_KEYS
) -> list[KeyRanges]:
    """The ranges of each key column of `changes` (the change rows, a key possibly on several,
    no NULL key) that a range can be written for; at most `most_collected` rows are fetched,
    beyond that each column gets one range, its minimum to its maximum."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    types = {f.name: f.dataType for f in changes.schema.fields}
    kinds = {k: kind for k in keys if (kind := _literal_kind(types[k])) is not None}
    if not kinds:
        return []
    columns = [F.col(quote_ident(k)) for k in kinds]
    rows = changes.select(*columns).limit(most_collected + 1).collect()
    if not rows:
        return []
    found = []
    if len(rows) <= most_collected:
        for key, kind in kinds.items():
            values = [row[key] for row in rows]
            if kind == "int":
                found.append(KeyRanges(key, kind, tuple(integer_ranges(values))))
            else:
                found.append(KeyRanges(key, kind, ((min(values), max(values)),)))
        return found
    aggregates = [F.min(c) for c in columns] + [F.max(c) for c in columns]
    bounds = changes.agg(*aggregates).collect()[0]
    for index, (key, kind) in enumerate(kinds.items()):
        found.append(KeyRanges(key, kind, ((bounds[index], bounds[index + len(kinds)]),)))
    return found


def files_skipped(
    target: str, ranges: Sequence[KeyRanges], storage: StorageConfig = ENVIRONMENT_ONLY
) -> int:
    """How many of silver's files the ranges rule out by their min/max statistics, read from
    the log without Spark with the lake's object-store options (default: the environment's
    settings alone): what Delta's data skipping will find."""
    actions = open_delta_table(target, storage).get_add_actions(flatten=True)
    names = set(actions.column_names)

    def column(name: str) -> list[Any]:
        if name not in names:
            return [None] * actions.num_rows
        return list(actions.column(name).to_pylist())

    bounds = [(r, column(f"min.{r.column}"), column(f"max.{r.column}")) for r in ranges]
    return sum(
        1
        for index in range(actions.num_rows)
        if not all(r.overlaps(lows[index], highs[index]) for r, lows, highs in bounds)
    )


def key_filter(
    spark: SparkSession,
    target: str,
    changes: DataFrame,
    keys: Sequence[str],
    *,
    storage: StorageConfig = ENVIRONMENT_ONLY,
) -> str | None:
    """The condition on silver `t` for the MERGE of `changes` into `target`, or None when the
    session turns it off, no key column can have one, or it would not skip a single file (a
    backlog spread over every file)."""
    if not switched_on(spark, ENABLED_CONF):
        return None
    ranges = key_ranges(changes, keys)
    if not ranges or not files_skipped(target, ranges, storage):
        return None
    return " AND ".join(r.sql() for r in ranges)
