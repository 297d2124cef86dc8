"""SCD2 silver in the generated histories (`history: scd2` in the seed's config,
`cdf_platform_testkit.faults.options`), and the conforming steps applied to a snapshot.

- Conforming: the oracle applies the pipeline's transform, derived columns and `where` to the
  bronze snapshot in Python (`cdf_platform_testkit.faults.change_oracle.conform_row`).
- SCD2 (hard deletes): silver's open versions are exactly the rows the change oracle expects of
  an SCD1 silver with hard deletes (the snapshot, unless `ignore_null_updates` kept values), on
  bronze's conformed columns; a retired column, one bronze no longer has, is NULL on them; every
  version closed
  before the run is unchanged, a key's versions never overlap and at most one is open, and no
  version was opened by a commit after the watermark.
- SCD2 with `sequence_by` (versions ordered and dated by `seq`): silver's rows are exactly the
  history oracle's (`cdf_platform_testkit.faults.history_oracle`), every version of every key,
  `__start_at`, `__end_at` and `_source_commit_version` included (`__changes`, the changes the
  platform keeps per version, is not compared).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from datetime import datetime
from itertools import pairwise
from typing import Any

from cdf_platform_testkit.faults.bronze_model import KEY, Row
from cdf_platform_testkit.faults.change_oracle import conform_row, conformed_columns
from cdf_platform_testkit.faults.history_oracle import END_AT, START_AT
from cdf_platform_testkit.faults.options import HistoryConfig
from cdf_platform_testkit.faults.oracle import PLATFORM_COLUMNS, SOURCE_VERSION, read_rows

# SCD2 with `sequence_by`: the changes each version holds (the platform's, not compared).
CHANGES = "__changes"
HISTORY_COLUMNS = (START_AT, END_AT, SOURCE_VERSION)


def conform_snapshot(
    config: HistoryConfig, snapshot: list[Row], columns: list[str]
) -> tuple[list[Row], list[str]]:
    """The bronze snapshot (and its columns) after the pipeline's conforming steps, as the
    oracle computes them."""
    conformed = [conform_row(config, row) for row in snapshot]
    return [row for row, kept in conformed if kept], conformed_columns(config, columns)


def _same_version(one: Row, other: Row) -> bool:
    return (one[KEY], one[START_AT]) == (other[KEY], other[START_AT])


def history_problems(
    target: str,
    previous: list[Row],
    snapshot: list[Row],
    snapshot_columns: list[str],
    watermark: int,
) -> tuple[list[Row], list[str]]:
    """SCD2 silver's rows at `target`, read with delta-rs, and every way they break the oracle
    after a run to `watermark` (module doc); `previous`: the rows after the run before;
    `snapshot`: the current rows expected, on `snapshot_columns` at least."""
    _, rows = read_rows(target)
    problems: list[str] = []
    current = {row[KEY]: row for row in rows if row[END_AT] is None}
    wanted = {row[KEY]: row for row in snapshot}
    if sorted(current) != sorted(wanted):
        missing, extra = sorted(set(wanted) - set(current)), sorted(set(current) - set(wanted))
        problems.append(f"open versions: keys {missing} missing, keys {extra} not in bronze")
    platform = {*PLATFORM_COLUMNS, START_AT, END_AT}
    for key in sorted(set(current) & set(wanted)):
        got = {c: current[key].get(c) for c in snapshot_columns}
        want = {c: wanted[key].get(c) for c in snapshot_columns}
        if got != want:
            problems.append(f"key {key}: open version {got}, bronze {want}")
        retired = {
            c: v
            for c, v in current[key].items()
            if c not in snapshot_columns and c not in platform and v is not None
        }
        if retired:
            problems.append(f"key {key}: open version holds retired columns {retired}")
    closed_before = [row for row in previous if row[END_AT] is not None]
    for row in closed_before:
        # Compared on the columns it had: a column silver gained since holds NULL on it.
        if not any(all(other.get(c) == v for c, v in row.items()) for other in rows):
            problems.append(f"closed version {row} was changed or removed")
        elif any(
            other.get(c) is not None
            for other in rows
            if _same_version(other, row)
            for c in set(other) - set(row)
        ):
            problems.append(f"closed version {row} gained values in new columns")
    opened_before = {(row[KEY], row[START_AT]) for row in previous}
    by_key: dict[Any, list[Row]] = defaultdict(list)
    for row in rows:
        by_key[row[KEY]].append(row)
        opened = (row[KEY], row[START_AT]) not in opened_before
        if opened and (row[SOURCE_VERSION] is None or row[SOURCE_VERSION] > watermark):
            problems.append(f"version {row} opened past the watermark {watermark}")
    for key, versions in by_key.items():
        ordered = sorted(versions, key=lambda r: (r[START_AT] or datetime.min, r[SOURCE_VERSION]))
        if sum(1 for r in ordered if r[END_AT] is None) > 1:
            problems.append(f"key {key} has more than one open version")
        for earlier, later in pairwise(ordered):
            if earlier[END_AT] is None or earlier[END_AT] > later[START_AT]:
                problems.append(f"key {key}: versions {earlier} and {later} overlap")
    return rows, problems


def _line(row: Row, columns: Sequence[str]) -> tuple[Any, ...]:
    """A version as one comparable tuple: start, end, opening version, then data values."""
    return tuple(row.get(c) for c in (*HISTORY_COLUMNS, *columns))


def _by_start(line: tuple[Any, ...]) -> tuple[Any, ...]:
    start, _, version = line[:3]
    return (start is None, start or 0, version is None, version or 0)


def sequenced_history_problems(
    target: str, expected: list[Row], columns: Sequence[str]
) -> tuple[list[Row], list[str]]:
    """SCD2 silver's rows at `target` (ordered by `sequence_by`), read with delta-rs, and every
    way they differ from the history oracle's `expected` rows (module doc) on silver's data
    columns `columns` and the history columns; a key whose versions differ is reported with
    both lists of versions, as (start, end, opened by version, data values...)."""
    names, rows = read_rows(target)
    problems: list[str] = []
    wanted_columns = {*columns, *HISTORY_COLUMNS}
    got_columns = set(names) - {CHANGES}
    if got_columns != wanted_columns:
        problems.append(
            f"silver columns {sorted(got_columns)} != expected {sorted(wanted_columns)}"
        )
    got: dict[Any, Counter[tuple[Any, ...]]] = defaultdict(Counter)
    want: dict[Any, Counter[tuple[Any, ...]]] = defaultdict(Counter)
    for row in rows:
        got[row.get(KEY)][_line(row, columns)] += 1
    for row in expected:
        want[row[KEY]][_line(row, columns)] += 1
    for key in sorted(set(got) | set(want), key=repr):
        if got[key] != want[key]:
            silver = sorted(got[key].elements(), key=_by_start)
            oracle = sorted(want[key].elements(), key=_by_start)
            problems.append(
                f"key {key} (start, end, version, {', '.join(columns)}): "
                f"silver {silver}, oracle {oracle}"
            )
    return rows, problems
