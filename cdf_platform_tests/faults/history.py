"""A seeded generator of hostile bronze histories.

`plan_history(seed, profile)` fixes the sequence of operation kinds for a seed (no I/O), and
`apply_bronze_op` draws each operation's parameters from the model's current state with the
same seeded generator, so a seed replays the same history (only the instant a concurrent commit
lands inside a run depends on timing).

Operations: insert batches, updates, deletes, re-inserts of deleted keys, MERGE upserts (with
deletes), full overwrite,
`replaceWhere`, an added column, an overwrite that drops that column, OPTIMIZE, checkpoints,
VACUUM with zero retention, VACUUM after aging under a one-second retention (with log cleanup
behind a checkpoint), a change-feed gap, a table recreate, and consumer runs after pauses of
varying length: plain, with a bronze commit landing during the run, or while the retention is
shorter than the pause (time-travel limit).

Example:
    >>> plan_history(7, HistoryProfile(operations=10, runs=(3, 3)))[:3]  # doctest: +SKIP
    [<Op.INSERT: 'insert'>, <Op.RUN: 'run'>, <Op.MERGE: 'merge'>]
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from cdf_platform_tests.faults.bronze_model import EXTRA_COLUMN, KEY, BronzeTable, Row


class Op(StrEnum):
    """One step of a history."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"
    REINSERT = "reinsert"
    MERGE = "merge"
    OVERWRITE = "overwrite"
    REPLACE_WHERE = "replace_where"
    ADD_COLUMN = "add_column"
    DROP_COLUMN = "drop_column"
    OPTIMIZE = "optimize"
    CHECKPOINT = "checkpoint"
    VACUUM = "vacuum"
    AGED_VACUUM = "aged_vacuum"
    CDF_GAP = "cdf_gap"
    RECREATE = "recreate"
    RUN = "run"
    RUN_WITH_COMMIT = "run_with_commit"
    RUN_SQUEEZED = "run_squeezed"


RUNS = (Op.RUN, Op.RUN_WITH_COMMIT, Op.RUN_SQUEEZED)
# Data operations that may land while a consumer run is in progress.
CONCURRENT_OPS = (Op.INSERT, Op.UPDATE, Op.DELETE, Op.MERGE)
_COMMON_WEIGHTS = {
    Op.INSERT: 5,
    Op.UPDATE: 5,
    Op.DELETE: 3,
    Op.REINSERT: 1,
    Op.MERGE: 4,
    Op.OVERWRITE: 1,
    Op.REPLACE_WHERE: 2,
    Op.OPTIMIZE: 2,
    Op.CHECKPOINT: 1,
    Op.VACUUM: 2,
}
NAMES = ("ada", "bob", "cy", "dee", "eve", "fay", None)
KEY_POOL = 40


@dataclass(frozen=True)
class HistoryProfile:
    """The shape of generated histories.

    Attributes:
        operations: steps per history, consumer runs included (the last step is a run).
        runs: (min, max) consumer runs per history; they cost seconds each, bronze steps
            milliseconds.
        rare: probability that a history holds each rare step (at most one of each).
        run_with_commit / run_squeezed: probability that a run after the first is of that kind.
        age_seconds: how long an aged VACUUM waits for files to outlive a one-second retention.
    """

    operations: int = 28
    runs: tuple[int, int] = (3, 4)
    rare: float = 0.4
    run_with_commit: float = 0.35
    run_squeezed: float = 0.15
    age_seconds: float = 1.2


CI_PROFILE = HistoryProfile()
FUZZ_PROFILE = HistoryProfile(operations=32, runs=(4, 6))
RARE_OPS = (Op.ADD_COLUMN, Op.AGED_VACUUM, Op.CDF_GAP, Op.RECREATE)


def plan_history(seed: int, profile: HistoryProfile) -> list[Op]:
    """The operation kinds of history `seed`: consumer runs after pauses of varying length, the
    rest weighted bronze operations plus a few rare ones."""
    rng = random.Random(seed)
    n = profile.operations
    count = rng.randint(*profile.runs)
    first = rng.randint(1, 3)
    middle = rng.sample(range(first + 1, n - 1), count - 2)
    run_slots = sorted({first, n - 1, *middle})
    plan: list[Op] = []
    for index in range(n):
        if index in run_slots:
            draw = rng.random()
            if index == first:
                plan.append(Op.RUN)
            elif draw < profile.run_squeezed:
                plan.append(Op.RUN_SQUEEZED)
            elif draw < profile.run_squeezed + profile.run_with_commit:
                plan.append(Op.RUN_WITH_COMMIT)
            else:
                plan.append(Op.RUN)
        else:
            kinds, weights = zip(*_COMMON_WEIGHTS.items(), strict=True)
            plan.append(rng.choices(kinds, weights)[0])
    free = [i for i in range(1, n - 1) if plan[i] not in RUNS]
    for rare in RARE_OPS:
        if rng.random() < profile.rare and free:
            slot = rng.choice(free)
            free.remove(slot)
            plan[slot] = rare
    if Op.ADD_COLUMN in plan and rng.random() < 0.5:
        later = [i for i in free if i > plan.index(Op.ADD_COLUMN)]
        # Prefer a drop with a run after it and room for a re-insert before the last run.
        roomy = [
            i for i in later if _reinsert_slots(plan, free, i) and _delete_slots(plan, free, i)
        ]
        if later:
            drop = rng.choice(roomy or later)
            plan[drop] = Op.DROP_COLUMN
            free.remove(drop)
            _retire_around(plan, free, plan.index(Op.ADD_COLUMN), drop)
    return plan


def _reinsert_slots(plan: list[Op], free: list[int], dropped: int) -> list[int]:
    """Free slots after the first run that follows slot `dropped`."""
    retiring = next((i for i in range(dropped + 1, len(plan)) if plan[i] in RUNS), None)
    return [i for i in free if retiring is not None and i > retiring]


def _delete_slots(plan: list[Op], free: list[int], dropped: int) -> list[int]:
    """Free slots before slot `dropped` and after a run that follows the added column (so silver
    holds the column's values when the delete comes)."""
    added = plan.index(Op.ADD_COLUMN)
    loaded = next((i for i in range(added + 1, dropped) if plan[i] in RUNS), None)
    return [i for i in free if loaded is not None and loaded < i < dropped]


def _retire_around(plan: list[Op], free: list[int], added: int, dropped: int) -> None:
    """Around a dropped column: a delete before the drop and a re-insert of the deleted key after
    the run that retires the column (the rebuild), so a soft-delete pipeline shows whether the
    re-inserted row revives the retired column's old value."""
    before = _delete_slots(plan, free, dropped) or [i for i in free if added < i < dropped]
    if before:
        slot = max(before)
        plan[slot] = Op.DELETE
        free.remove(slot)
    after = _reinsert_slots(plan, free, dropped)
    if after:
        slot = min(after)
        plan[slot] = Op.REINSERT
        free.remove(slot)


def _row(rng: random.Random, key: int, columns: list[str]) -> Row:
    row: Row = {KEY: key, "name": rng.choice(NAMES), "amount": rng.randint(0, 999)}
    if EXTRA_COLUMN in columns:
        row[EXTRA_COLUMN] = rng.choice((None, f"n{rng.randint(0, 99)}"))
    return row


def _new_keys(rng: random.Random, bronze: BronzeTable, count: int, minimum: int = 1) -> list[int]:
    free = [k for k in range(minimum, KEY_POOL + 1) if k not in bronze.rows]
    if len(free) < count:
        top = max([KEY_POOL, *bronze.rows])
        free += list(range(top + 1, top + 1 + count))
    return rng.sample(free, count)


def _present(rng: random.Random, bronze: BronzeTable, low: int, high: int) -> list[int]:
    keys = bronze.keys()
    return rng.sample(keys, min(len(keys), rng.randint(low, high)))


def _rewritten(rng: random.Random, bronze: BronzeTable, keys: list[int]) -> list[Row]:
    """Present rows for `keys`, about half of them with new values."""
    return [
        _row(rng, k, bronze.columns) if rng.random() < 0.5 else dict(bronze.rows[k]) for k in keys
    ]


def apply_bronze_op(op: Op, bronze: BronzeTable, rng: random.Random, profile: HistoryProfile) -> Op:
    """Apply `op` to bronze with parameters drawn from `rng`; return the op actually applied
    (one whose precondition fails, such as an update of an empty table, becomes an insert)."""
    keys = bronze.keys()
    columns = bronze.columns
    if op in (Op.UPDATE, Op.DELETE, Op.CDF_GAP) and not keys:
        op = Op.INSERT
    if op is Op.REINSERT and not bronze.gone_keys():
        op = Op.INSERT
    if op is Op.ADD_COLUMN and EXTRA_COLUMN in columns:
        op = Op.INSERT
    if op is Op.DROP_COLUMN and EXTRA_COLUMN not in columns:
        op = Op.OVERWRITE
    if op is Op.INSERT:
        bronze.insert([_row(rng, k, columns) for k in _new_keys(rng, bronze, rng.randint(1, 4))])
    elif op is Op.UPDATE:
        name = rng.choice(NAMES)
        bronze.update(_present(rng, bronze, 1, 3), amount_delta=rng.randint(1, 50), name=name)
    elif op is Op.DELETE:
        targets = _present(rng, bronze, 1, 3)
        noted = [k for k in keys if bronze.rows[k].get(EXTRA_COLUMN) is not None]
        if noted:
            # A deleted row holding a value in the column a later drop retires: a soft-delete
            # silver must not bring that value back when the key returns.
            targets = rng.sample(noted, min(len(noted), len(targets)))
        if rng.random() < 0.15:
            targets = _new_keys(rng, bronze, 1)  # matches nothing: no version is written
        bronze.delete(targets)
    elif op is Op.REINSERT:
        gone = bronze.gone_keys()
        bronze.insert([_row(rng, k, columns) for k in gone[: rng.randint(1, 2)]])
    elif op is Op.MERGE:
        updated = _present(rng, bronze, 0, 2)
        deleted = [k for k in _present(rng, bronze, 0, 2) if k not in updated]
        upserts = [_row(rng, k, columns) for k in updated]
        upserts += [_row(rng, k, columns) for k in _new_keys(rng, bronze, rng.randint(0, 2))]
        if not upserts and not deleted:
            upserts = [_row(rng, k, columns) for k in _new_keys(rng, bronze, 1)]
        bronze.merge(upserts, deleted)
    elif op is Op.OVERWRITE:
        kept = [k for k in keys if rng.random() < 0.6] if rng.random() > 0.1 else []
        rows = _rewritten(rng, bronze, kept)
        rows += [_row(rng, k, columns) for k in _new_keys(rng, bronze, rng.randint(0, 3))]
        bronze.overwrite(rows)
    elif op is Op.REPLACE_WHERE:
        low = rng.randint(1, KEY_POOL)
        kept = [k for k in keys if k >= low and rng.random() < 0.5]
        rows = _rewritten(rng, bronze, kept)
        new = _new_keys(rng, bronze, rng.randint(0, 2), minimum=low)
        bronze.replace_where(low, rows + [_row(rng, k, columns) for k in new])
    elif op is Op.ADD_COLUMN:
        if rng.random() < 0.5:
            bronze.add_column()
        else:
            with_note = [*columns, EXTRA_COLUMN]
            bronze.add_column([_row(rng, k, with_note) for k in _new_keys(rng, bronze, 2)])
    elif op is Op.DROP_COLUMN:
        bronze.overwrite_dropping_column([dict(bronze.rows[k]) for k in keys])
    elif op is Op.OPTIMIZE:
        bronze.optimize()
    elif op is Op.CHECKPOINT:
        bronze.checkpoint()
    elif op is Op.VACUUM:
        bronze.vacuum_now(full=rng.random() < 0.6)
    elif op is Op.AGED_VACUUM:
        bronze.vacuum_after_aging(
            full=rng.random() < 0.7, clean_log=rng.random() < 0.5, age_seconds=profile.age_seconds
        )
    elif op is Op.CDF_GAP:
        bronze.cdf_gap(_present(rng, bronze, 1, 2), amount_delta=rng.randint(1, 9))
    elif op is Op.RECREATE:
        survivors = [k for k in keys if rng.random() < 0.5]
        new = _new_keys(rng, bronze, rng.randint(1, 3))
        rows = _rewritten(rng, bronze, survivors) + [_row(rng, k, columns) for k in new]
        bronze.recreate(rows, keep_extra_column=rng.random() < 0.5)
    else:
        raise ValueError(f"{op} is not a bronze operation")
    return op


def initial_rows(rng: random.Random) -> list[Row]:
    """The rows bronze is created with (0 to 6)."""
    keys = rng.sample(range(1, KEY_POOL + 1), rng.randint(0, 6))
    return [_row(rng, k, ["id", "name", "amount"]) for k in keys]
