"""A condition on silver's keys, implied by the incremental MERGE's join, that lets Delta skip
silver files a backlog does not reach.

Delta's MERGE finds the silver files that hold a changed key by joining the change set with
silver on the key columns; with nothing but `t.k = s.k` in the ON clause it reads the keys of
every silver file to do so. `key_filter` adds, per key column, the ranges that hold the change
set's values (at most `MAX_RANGES`, split at the widest gaps for integer keys; one range for
strings and dates). Delta's data skipping compares them with each file's min/max statistics, so a
backlog clustered in key ranges, over a silver laid out by key (as the first load writes it),
reads only the files of those ranges.

Every silver row whose key is in the change set satisfies the condition, so the MERGE matches
exactly the rows it matches without it (the incremental MERGE has no WHEN NOT MATCHED BY SOURCE
clause, the only kind of clause a target-side condition could change). Key columns of other types
(timestamps, decimals, floats, binary, non-binary collations) get no range.
`spark.cdf_platform.merge.keyFilter` set to `false` turns it off.

The changed keys themselves are not listed (`t.k IN (...)`): measured, parsing and analysing a
MERGE with 10,000 listed keys took 0.6-1.5 s more than the shuffle it saved.

Example:
    >>> key_filter(spark, per_commit_changes, ["id"])  # doctest: +SKIP
    '(t.`id` BETWEEN 3 AND 90 OR t.`id` BETWEEN 4000 AND 4100)'
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from itertools import pairwise
from typing import TYPE_CHECKING

from cdf_platform.core.sql import quote_ident, sql_string

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
    """Sorted distinct `values` as at most `most` (low, high) ranges, split at the widest gaps.

    Example:
        >>> integer_ranges([1, 2, 3, 100, 101, 7], most=2)
        [(1, 7), (100, 101)]
    """
    ordered = sorted(set(values))
    if not ordered:
        return []
    gaps = sorted(range(1, len(ordered)), key=lambda i: ordered[i] - ordered[i - 1], reverse=True)
    cuts = sorted(gaps[: max(most - 1, 0)])
    bounds = [0, *cuts, len(ordered)]
    return [(ordered[lo], ordered[hi - 1]) for lo, hi in pairwise(bounds)]


def _column_ranges(column: str, kind: str, values: list[object], collected: bool) -> str:
    ref = f"t.{quote_ident(column)}"
    ranges: list[tuple[object, object]]
    if kind == "int" and collected:
        ranges = list(integer_ranges([v for v in values if isinstance(v, int)]))
    else:  # every value of a string or date key, or the (min, max) of a large change set
        ranges = [(min(values), max(values))]  # type: ignore[type-var]
    between = " OR ".join(
        f"{ref} BETWEEN {_literal(kind, lo)} AND {_literal(kind, hi)}" for lo, hi in ranges
    )
    return f"({between})"


def enabled(spark: SparkSession) -> bool:
    """Whether the session allows the key predicate (`spark.cdf_platform.merge.keyFilter`)."""
    return str(spark.conf.get(ENABLED_CONF, "true")).strip().lower() != "false"


def key_filter(
    spark: SparkSession,
    changes: DataFrame,
    keys: Sequence[str],
    most_collected: int = MAX_COLLECTED_KEYS,
) -> str | None:
    """SQL over silver alias `t` implied by `t.k = s.k` for every key of `changes` (the change
    rows, a key possibly on several, no NULL key), or None when no key column has a type it can
    be written for or the session turns it off. At most `most_collected` rows are fetched."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    if not enabled(spark):
        return None
    types = {f.name: f.dataType for f in changes.schema.fields}
    kinds = {k: kind for k in keys if (kind := _literal_kind(types[k])) is not None}
    if not kinds:
        return None
    columns = [F.col(quote_ident(k)) for k in kinds]
    rows = changes.select(*columns).limit(most_collected + 1).collect()
    if not rows:
        return None
    collected = len(rows) <= most_collected
    if collected:
        values = {k: [row[k] for row in rows] for k in kinds}
    else:
        aggregates = [F.min(c) for c in columns] + [F.max(c) for c in columns]
        bounds = changes.agg(*aggregates).collect()[0]
        values = {k: [bounds[i], bounds[i + len(kinds)]] for i, k in enumerate(kinds)}
    return " AND ".join(_column_ranges(k, kinds[k], values[k], collected) for k in kinds)
