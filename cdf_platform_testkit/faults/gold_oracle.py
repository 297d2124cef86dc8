"""The gold oracle: what the histories' gold consumer (`cdf_platform_testkit.faults.gold`) must
hold after each of its runs, and whether its read of silver's change feed had lost its window;
plain Python over the rows the silver oracle expects and over silver's log and files, never
the platform's code.

- Totals: per `name` (NULL is one group), `people` = how many live silver rows hold it and
  `amount_total` = the sum of their non-NULL `amount` (0 when none). A live row is one the
  silver oracle expects present: not soft-deleted (SCD1 `delete_mode: soft`), and for SCD2 the
  current version (`__end_at` NULL) only. A name no live row holds has no gold row.
- Lost window (docs/design.md section 4, rule 4, for silver): a range (W, L] of silver is lost
  when a file a change-feed read of one of its commits needs is gone: the commit's `cdc` files
  if it has any, else its `add`/`remove` files with dataChange=true and the deletion-vector
  files they name (an inline vector needs none). The other rules cannot fire here: the histories
  never clean silver's log, shorten its retention, turn its change feed off or drop a column
  from it (retired columns stay).

Example:
    >>> expected_totals([{"name": "ada", "amount": 3}, {"name": "ada", "amount": None}])
    {'ada': (2, 3)}
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote

from cdf_platform_testkit.faults.oracle import needed_files

GROUP = "name"
AMOUNT = "amount"
PEOPLE = "people"
AMOUNT_TOTAL = "amount_total"
GOLD_COLUMNS = (GROUP, PEOPLE, AMOUNT_TOTAL)
# Z85 (ZeroMQ's base 85), which Delta uses for a deletion vector's file name.
_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def expected_totals(live_rows: Iterable[Mapping[str, Any]]) -> dict[Any, tuple[int, int]]:
    """name -> (people, amount_total) over the live silver rows `live_rows`."""
    totals: dict[Any, tuple[int, int]] = {}
    for row in live_rows:
        people, total = totals.get(row[GROUP], (0, 0))
        amount = row[AMOUNT]
        totals[row[GROUP]] = (people + 1, total + (0 if amount is None else amount))
    return totals


def gold_problems(
    columns: list[str], rows: list[dict[str, Any]], expected: Mapping[Any, tuple[int, int]]
) -> list[str]:
    """Every way gold's `rows` (on `columns`, read back from its table) differ from the
    oracle's `expected` totals."""
    problems = []
    if sorted(columns) != sorted(GOLD_COLUMNS):
        problems.append(f"gold columns {columns} != {list(GOLD_COLUMNS)}")
        return problems
    got: dict[Any, tuple[int, int]] = {}
    for row in rows:
        if row[GROUP] in got:
            problems.append(f"gold holds name {row[GROUP]!r} twice")
        got[row[GROUP]] = (row[PEOPLE], row[AMOUNT_TOTAL])
    for name in sorted(set(got) | set(expected), key=repr):
        if got.get(name) != expected.get(name):
            problems.append(
                f"name {name!r}: gold (people, amount_total) {got.get(name)}, "
                f"oracle {expected.get(name)}"
            )
    return problems


def _z85_uuid(encoded: str) -> uuid.UUID:
    """The UUID a 20-character Z85 text encodes."""
    data = bytearray()
    for start in range(0, len(encoded), 5):
        value = 0
        for char in encoded[start : start + 5]:
            value = value * 85 + _Z85.index(char)
        data += value.to_bytes(4, "big")
    return uuid.UUID(bytes=bytes(data))


def deletion_vector_files(table: str, version: int) -> list[str]:
    """The deletion-vector files the `add`/`remove` actions (dataChange=true) of commit
    `version` name (Delta protocol: storage type `u` is a random prefix then the file's UUID
    in Z85, `p` an absolute path, `i` inline)."""
    log = os.path.join(table, "_delta_log", f"{version:020d}.json")
    with open(log, encoding="utf-8") as handle:
        actions = [json.loads(line) for line in handle if line.strip()]
    files = []
    for action in actions:
        for kind in ("add", "remove"):
            entry = action.get(kind)
            if entry is None or not entry.get("dataChange", True):
                continue
            vector = entry.get("deletionVector")
            if not vector:
                continue
            where = vector["pathOrInlineDv"]
            if vector["storageType"] == "u":
                prefix, encoded = where[:-20], where[-20:]
                name = f"deletion_vector_{_z85_uuid(encoded)}.bin"
                files.append(os.path.join(table, prefix, name))
            elif vector["storageType"] == "p":
                files.append(unquote(where.removeprefix("file:")))
    return files


def _has_cdc(table: str, version: int) -> bool:
    log = os.path.join(table, "_delta_log", f"{version:020d}.json")
    with open(log, encoding="utf-8") as handle:
        return any('"cdc"' in line for line in handle)


def silver_range_lost(table: str, watermark: int, latest: int) -> str | None:
    """Why a change-feed read of silver versions (watermark, latest] cannot be done (a needed
    file is gone), or None when it can."""
    for version in range(watermark + 1, latest + 1):
        needed = needed_files(table, version)
        if not _has_cdc(table, version):
            needed += deletion_vector_files(table, version)
        gone = [f for f in needed if not os.path.exists(f)]
        if gone:
            return f"silver version {version}: {len(gone)} needed files vacuumed"
    return None
