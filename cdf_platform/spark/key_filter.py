"""A predicate on silver's keys, implied by the incremental MERGE's join, that lets Delta read less
of silver.

Delta's MERGE joins the change set with silver twice: once on the key columns to find the files
that hold a changed key, then on every column of those files to write the changed rows. With
nothing but `t.k = s.k` in the ON clause, both joins read all of silver (a uniform backlog touches
every file), and the second shuffles every row of it. `key_filter` adds, per key column:

- the ranges that hold the change set's values (at most `MAX_RANGES`, split at the widest gaps
  for integer keys; one range for strings and dates): Delta's data skipping compares them with each
  file's min/max statistics, so files outside every range are not read (a backlog clustered in
  key ranges over a silver laid out by key, as the platform's first load writes it);
- for a change set of at most `MAX_LISTED_KEYS` keys, the values themselves (`IN`): Spark filters
  silver's rows before the shuffle, which then carries the matched rows, not all of silver.

Every silver row whose key is in the change set satisfies the predicate, so the MERGE matches
exactly the rows it matches without it (the incremental MERGE has no WHEN NOT MATCHED BY SOURCE
clause, the only kind of clause a target-side condition could change). Key columns of other types
(timestamps, decimals, floats, binary) get no predicate. `spark.cdf_platform.merge.keyFilter` set
to `false` turns the predicate off.

Example:
    >>> key_filter(spark, collapsed.frame, ["id"])  # doctest: +SKIP
    '(t.`id` BETWEEN 3 AND 90 OR t.`id` BETWEEN 4000 AND 4100) AND t.`id` IN (3, 7, ..., 4100)'
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
# Up to this many changed keys are listed in the predicate (a few hundred KB of SQL at most);
# beyond it only the overall range of each key column is.
MAX_LISTED_KEYS = 20_000
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


def _column_predicate(column: str, kind: str, values: list[object], listed: bool) -> str:
    ref = f"t.{quote_ident(column)}"
    ranges: list[tuple[object, object]]
    if kind == "int" and listed:
        ranges = list(integer_ranges([v for v in values if isinstance(v, int)]))
    else:  # every value of a string or date key, or the (min, max) of an unlisted change set
        ranges = [(min(values), max(values))]  # type: ignore[type-var]
    between = " OR ".join(
        f"{ref} BETWEEN {_literal(kind, lo)} AND {_literal(kind, hi)}" for lo, hi in ranges
    )
    predicate = f"({between})"
    if listed:
        distinct = sorted(set(values))  # type: ignore[type-var]
        predicate += f" AND {ref} IN ({', '.join(_literal(kind, v) for v in distinct)})"
    return predicate


def enabled(spark: SparkSession) -> bool:
    """Whether the session allows the key predicate (`spark.cdf_platform.merge.keyFilter`)."""
    return str(spark.conf.get(ENABLED_CONF, "true")).strip().lower() != "false"


def key_filter(
    spark: SparkSession,
    changes: DataFrame,
    keys: Sequence[str],
    most_listed: int = MAX_LISTED_KEYS,
) -> str | None:
    """SQL over silver alias `t` implied by `t.k = s.k` for every key of `changes` (one row per
    key, no NULL key), or None when no key column has a type it can be written for or the
    session turns it off. Values are listed for at most `most_listed` keys."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    if not enabled(spark):
        return None
    types = {f.name: f.dataType for f in changes.schema.fields}
    kinds = {k: kind for k in keys if (kind := _literal_kind(types[k])) is not None}
    if not kinds:
        return None
    columns = [F.col(quote_ident(k)) for k in kinds]
    rows = changes.select(*columns).limit(most_listed + 1).collect()
    if not rows:
        return None
    listed = len(rows) <= most_listed
    if listed:
        values = {k: [row[k] for row in rows] for k in kinds}
    else:
        aggregates = [F.min(c) for c in columns] + [F.max(c) for c in columns]
        bounds = changes.agg(*aggregates).collect()[0]
        values = {k: [bounds[i], bounds[i + len(kinds)]] for i, k in enumerate(kinds)}
    return " AND ".join(_column_predicate(k, kinds[k], values[k], listed) for k in kinds)
