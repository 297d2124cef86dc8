"""The history oracle (`history: scd2` with `sequence_by`) on hand-written events, without Spark:
late changes split or rewrite closed versions, a late re-insert does not resurrect a deleted
key, NULL updates take the key's earlier values, and a rebuild adds only what it can see."""

from __future__ import annotations

from typing import Any

from cdf_platform_testkit.faults.bronze_model import Change, Row, VersionRecord
from cdf_platform_testkit.faults.history_oracle import (
    END_AT,
    SOURCE_VERSION,
    START_AT,
    Event,
    HistoryOracle,
    Version,
    fold,
)
from cdf_platform_testkit.faults.options import HistoryConfig

COLUMNS = ["id", "name", "amount", "seq"]
# (start, end, opened by version, name, amount)
Line = tuple[Any, Any, int, Any, Any]


def _event(seq: int, version: int, kind: str, name: Any, amount: Any, key: int = 1) -> Event:
    return Event(seq, version, kind, {"id": key, "name": name, "amount": amount, "seq": seq})


def _lines(versions: list[Version]) -> list[Line]:
    return [
        (v.start_at, v.end_at, v.source_version, v.values["name"], v.values["amount"])
        for v in versions
    ]


def _row(key: int, name: Any, amount: Any, seq: int) -> Row:
    return {"id": key, "name": name, "amount": amount, "seq": seq}


def _record(changes: dict[int, Change]) -> VersionRecord:
    return VersionRecord(tuple(COLUMNS), {}, True, "WRITE", changes)


def _oracle(ignore_nulls: bool = False) -> HistoryOracle:
    nulls = "on" if ignore_nulls else "off"
    return HistoryOracle(HistoryConfig(history="scd2", sequence_by="on", ignore_nulls=nulls))


def _by_key(rows: list[Row]) -> dict[int, list[Line]]:
    out: dict[int, list[Line]] = {}
    for row in rows:
        line = (row[START_AT], row[END_AT], row[SOURCE_VERSION], row["name"], row["amount"])
        out.setdefault(row["id"], []).append(line)
    return out


def test_an_out_of_order_change_splits_the_closed_version_its_sequence_value_falls_in() -> None:
    events = [
        _event(1000, 1, "insert", "ada", 10),
        _event(2000, 2, "update", "bob", 20),
        _event(3000, 3, "update", "cy", 30),
    ]
    assert _lines(fold(events, COLUMNS)) == [
        (1000, 2000, 1, "ada", 10),
        (2000, 3000, 2, "bob", 20),
        (3000, None, 3, "cy", 30),
    ]

    late = _event(1500, 4, "update", "dee", 15)

    assert _lines(fold([*events, late], COLUMNS)) == [
        (1000, 1500, 1, "ada", 10),
        (1500, 2000, 4, "dee", 15),
        (2000, 3000, 2, "bob", 20),
        (3000, None, 3, "cy", 30),
    ]


def test_a_late_change_inside_a_version_updated_in_place_rewrites_or_splits_it() -> None:
    """Only `name` is tracked: amount changes update the open version in place."""
    events = [
        _event(1000, 1, "insert", "ada", 10),
        _event(2000, 2, "update", "ada", 20),
        _event(3000, 3, "update", "bob", 30),
        _event(4000, 4, "update", "bob", 40),
    ]
    assert _lines(fold(events, COLUMNS, tracked=["name"])) == [
        (1000, 3000, 1, "ada", 20),
        (3000, None, 3, "bob", 40),
    ]
    # An untracked change after the version's last in-place change: the closed version takes
    # its values.
    rewrite = _event(2500, 5, "update", "ada", 25)
    # A tracked change between two in-place changes: the version splits in three.
    split = _event(3500, 6, "update", "cy", 35)

    assert _lines(fold([*events, rewrite, split], COLUMNS, tracked=["name"])) == [
        (1000, 3000, 1, "ada", 25),
        (3000, 3500, 3, "bob", 30),
        (3500, 4000, 6, "cy", 35),
        (4000, None, 4, "bob", 40),
    ]


def test_every_value_column_is_tracked_by_default_so_each_sequence_value_opens_a_version() -> None:
    events = [_event(1000, 1, "insert", "ada", 10), _event(2000, 2, "update", "ada", 10)]
    assert _lines(fold(events, COLUMNS)) == [(1000, 2000, 1, "ada", 10), (2000, None, 2, "ada", 10)]
    # The same values at the same sequence value (a row rewritten as it was): in place.
    again = _event(2000, 3, "update", "ada", 10)
    assert _lines(fold([*events, again], COLUMNS)) == _lines(fold(events, COLUMNS))


def test_a_late_older_reinsert_after_a_delete_does_not_resurrect_the_key() -> None:
    # The delete carries the deleted row's own sequence value: it closes the version at it.
    events = [
        _event(1000, 1, "insert", "ada", 10),
        _event(2000, 2, "update", "bob", 20),
        _event(2000, 3, "delete", "bob", 20),
    ]
    assert _lines(fold(events, COLUMNS)) == [(1000, 2000, 1, "ada", 10), (2000, 2000, 2, "bob", 20)]

    late = _event(1500, 4, "insert", "cy", 15)

    assert _lines(fold([*events, late], COLUMNS)) == [
        (1000, 1500, 1, "ada", 10),
        (1500, 2000, 4, "cy", 15),
        (2000, 2000, 2, "bob", 20),
    ]
    # A newer insert does bring it back.
    back = _event(5000, 5, "insert", "dee", 50)
    assert _lines(fold([*events, late, back], COLUMNS))[-1] == (5000, None, 5, "dee", 50)


def test_null_updates_take_the_last_value_since_the_last_insert_or_delete() -> None:
    """`ignore_null_updates`, name and amount tracked: a NULL update opens no version, a
    delete's values are never carried, an insert's NULLs stand."""
    events = [
        _event(1000, 1, "insert", "ada", 10),
        _event(2000, 2, "update", None, None),  # takes (ada, 10): in place
        _event(3000, 3, "delete", "ada", 10),
        _event(4000, 4, "update", None, 40),  # after the delete: nothing to take
        _event(5000, 5, "insert", None, 50),  # an insert's NULL stands
        _event(6000, 6, "update", "eve", None),  # takes 50
    ]
    assert _lines(fold(events, COLUMNS, tracked=["name", "amount"], ignore_nulls=True)) == [
        (1000, 3000, 1, "ada", 10),
        (4000, 5000, 4, None, 40),
        (5000, 6000, 5, None, 50),
        (6000, None, 6, "eve", 50),
    ]
    # Without the option the NULLs are values like any other.
    assert _lines(fold(events[:2], COLUMNS, tracked=["name", "amount"])) == [
        (1000, 2000, 1, "ada", 10),
        (2000, None, 2, None, None),
    ]


def test_the_fill_is_recomputed_when_a_late_change_lands_before_a_null_update() -> None:
    events = [_event(1000, 1, "insert", "ada", 10), _event(3000, 2, "update", None, 30)]
    tracked = ["name", "amount"]
    assert _lines(fold(events, COLUMNS, tracked=tracked, ignore_nulls=True)) == [
        (1000, 3000, 1, "ada", 10),
        (3000, None, 2, "ada", 30),
    ]

    late = _event(2000, 3, "update", "bob", 20)

    assert _lines(fold([*events, late], COLUMNS, tracked=tracked, ignore_nulls=True)) == [
        (1000, 2000, 1, "ada", 10),
        (2000, 3000, 3, "bob", 20),
        (3000, None, 2, "bob", 30),
    ]


def test_retired_columns_are_null_on_the_current_version_and_kept_on_closed_ones() -> None:
    columns = [*COLUMNS, "note"]
    events = [
        Event(1000, 1, "insert", {"id": 1, "name": "ada", "amount": 1, "seq": 1000, "note": "x"}),
        Event(2000, 2, "update", {"id": 1, "name": "bob", "amount": 2, "seq": 2000, "note": "y"}),
    ]
    versions = fold(events, columns, retired={"note"})
    assert [v.values["note"] for v in versions] == ["x", None]
    # A retired column is neither compared nor filled.
    same = Event(2000, 3, "update", {"id": 1, "name": "bob", "amount": 2, "seq": 2000})
    filled = fold([*events, same], columns, retired={"note"}, ignore_nulls=True)
    assert [(v.start_at, v.end_at) for v in filled] == [(1000, 2000), (2000, None)]


def test_a_rebuild_adds_what_the_snapshot_shows_and_closes_keys_it_lacks() -> None:
    oracle = _oracle()
    # The initial load at version 3.
    oracle.rebuild(
        [_row(1, "ada", 10, 1000), _row(2, "bob", 20, 1000), _row(4, "dee", 40, 0)], 3, COLUMNS
    )
    oracle.incremental(
        {
            4: _record({1: ("update", _row(1, "ada", 11, 4000))}),
            5: _record({2: ("delete", _row(2, "bob", 20, 1000))}),
        },
        3,
        5,
    )
    assert _by_key(oracle.expected(COLUMNS, set())) == {
        1: [(1000, 4000, 3, "ada", 10), (4000, None, 4, "ada", 11)],
        2: [(1000, 1000, 3, "bob", 20)],
        4: [(0, None, 3, "dee", 40)],
    }

    # The window (5, 8] is lost. Bronze at 8: key 1 holds an older write (an out-of-order
    # update made inside the window), key 3 is new, key 4 is gone, key 2 is still gone.
    oracle.rebuild([_row(1, "ada", 12, 3000), _row(3, "cy", 30, 6000)], 8, COLUMNS)

    assert _by_key(oracle.expected(COLUMNS, set())) == {
        1: [(1000, 3000, 3, "ada", 10), (3000, 4000, 8, "ada", 12), (4000, None, 4, "ada", 11)],
        2: [(1000, 1000, 3, "bob", 20)],
        3: [(6000, None, 8, "cy", 30)],
        4: [(0, 0, 3, "dee", 40)],
    }
    # A rebuild that sees nothing new adds nothing: the same s and values are known.
    before = oracle.expected(COLUMNS, set())
    oracle.rebuild([_row(1, "ada", 11, 4000), _row(3, "cy", 30, 6000)], 9, COLUMNS)
    assert oracle.expected(COLUMNS, set()) == before


def test_the_history_does_not_depend_on_how_commits_were_split_into_runs() -> None:
    versions = {
        1: _record({1: ("insert", _row(1, "ada", 10, 1000))}),
        2: _record(
            {1: ("update", _row(1, None, 20, 2000)), 2: ("insert", _row(2, "bob", 5, 2000))}
        ),
        3: _record({1: ("update", _row(1, "cy", 15, 1500))}),  # out of order
        4: _record({2: ("delete", _row(2, "bob", 5, 2000))}),
    }
    whole, split = _oracle(ignore_nulls=True), _oracle(ignore_nulls=True)
    whole.incremental(versions, 0, 4)
    for low, high in ((0, 1), (1, 3), (3, 4)):
        split.incremental(versions, low, high)
    assert whole.expected(COLUMNS, set()) == split.expected(COLUMNS, set())
    assert _by_key(whole.expected(COLUMNS, set()))[1] == [
        (1000, 1500, 1, "ada", 10),
        (1500, 2000, 3, "cy", 15),
        (2000, None, 2, "cy", 20),
    ]


def test_a_row_the_where_filter_drops_is_a_delete_of_its_key() -> None:
    oracle = HistoryOracle(HistoryConfig(history="scd2", sequence_by="on", conform="on"))
    versions = {
        1: _record({1: ("insert", _row(1, "ada", 11, 1000))}),
        2: _record({1: ("update", _row(1, "ada", 15, 2000))}),  # amount % 5 == 0: filtered
    }
    oracle.incremental(versions, 0, 2)
    columns = [*COLUMNS, "id_band", "big"]
    assert _by_key(oracle.expected(columns, set())) == {1: [(1000, 2000, 1, "ada", 11)]}
