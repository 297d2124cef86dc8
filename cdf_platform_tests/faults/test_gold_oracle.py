"""The gold oracle on hand-made inputs (no Spark): totals over live rows, the differences it
reports, and the lost-window ground truth for silver read from a hand-written Delta log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cdf_platform_testkit.faults.gold_oracle import (
    deletion_vector_files,
    expected_totals,
    gold_problems,
    silver_range_lost,
)

COLUMNS = ["name", "people", "amount_total"]
PROTOCOL_VECTOR = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 1}
PROTOCOL_FILE = "deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin"


def test_totals_count_every_live_row_and_sum_the_amounts_it_holds() -> None:
    rows = [
        {"name": "ada", "amount": 3},
        {"name": "ada", "amount": None},
        {"name": None, "amount": 5},
        {"name": None, "amount": 7},
        {"name": "bob", "amount": None},
    ]
    assert expected_totals(rows) == {"ada": (2, 3), None: (2, 12), "bob": (1, 0)}
    assert expected_totals([]) == {}


def test_gold_problems_name_each_missing_extra_wrong_or_duplicated_name() -> None:
    expected = {"ada": (2, 3), None: (1, 5), "cy": (1, 1)}
    rows = [
        {"name": "ada", "people": 2, "amount_total": 3},
        {"name": None, "people": 1, "amount_total": 4},
        {"name": "bob", "people": 1, "amount_total": 0},
        {"name": "bob", "people": 1, "amount_total": 0},
    ]
    problems = gold_problems(COLUMNS, rows, expected)
    assert problems == [
        "gold holds name 'bob' twice",
        "name 'bob': gold (people, amount_total) (1, 0), oracle None",
        "name 'cy': gold (people, amount_total) None, oracle (1, 1)",
        "name None: gold (people, amount_total) (1, 4), oracle (1, 5)",
    ]
    assert gold_problems(COLUMNS, rows[:1], {"ada": (2, 3)}) == []
    assert gold_problems(["name", "people"], [], {}) != []


def _commit(table: Path, version: int, actions: list[dict[str, Any]]) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(a) for a in [*actions, {"commitInfo": {"timestamp": 0}}]]
    (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n")


def test_a_deletion_vector_file_is_found_from_its_descriptor(tmp_path: Path) -> None:
    """Delta PROTOCOL.md's example: storage type `u`, `ab^-aqEH.-t@S}K{vb[*k^` is the file
    `ab/deletion_vector_d2c639aa-8816-431a-aaf6-d3fe2512ff61.bin` under the table; an inline
    vector and an action without data change name none."""
    inline = {"storageType": "i", "pathOrInlineDv": "wi5b=000010000siXQKl0rr91000f55c8Xg0@@D72"}
    actions = [
        {"add": {"path": "a.parquet", "dataChange": True, "deletionVector": PROTOCOL_VECTOR}},
        {"add": {"path": "b.parquet", "dataChange": True, "deletionVector": inline}},
        {"remove": {"path": "c.parquet", "dataChange": False, "deletionVector": PROTOCOL_VECTOR}},
    ]
    _commit(tmp_path, 3, actions)
    assert deletion_vector_files(str(tmp_path), 3) == [str(tmp_path / "ab" / PROTOCOL_FILE)]


def test_a_silver_range_is_lost_when_a_file_its_change_feed_needs_is_gone(tmp_path: Path) -> None:
    table = tmp_path / "silver"
    for name in ("a.parquet", "b.parquet", "_change_data/c1.parquet"):
        (table / name).parent.mkdir(parents=True, exist_ok=True)
        (table / name).write_text("")
    _commit(table, 0, [{"add": {"path": "a.parquet", "dataChange": True}}])
    _commit(table, 1, [{"cdc": {"path": "_change_data/c1.parquet"}}])
    (table / "ab").mkdir()
    (table / "ab" / PROTOCOL_FILE).write_text("")
    with_vector = {"path": "b.parquet", "dataChange": True, "deletionVector": PROTOCOL_VECTOR}
    _commit(table, 2, [{"add": with_vector}])
    assert silver_range_lost(str(table), 0, 2) is None
    (table / "a.parquet").unlink()  # needed by version 0 only
    assert silver_range_lost(str(table), 0, 2) is None
    (table / "ab" / PROTOCOL_FILE).unlink()
    assert silver_range_lost(str(table), 0, 2) == "silver version 2: 1 needed files vacuumed"
    (table / "_change_data/c1.parquet").unlink()
    assert silver_range_lost(str(table), 0, 2) == "silver version 1: 1 needed files vacuumed"
