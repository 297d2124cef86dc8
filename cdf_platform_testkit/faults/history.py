"""A seeded generator of hostile bronze histories.

`plan_history(seed, profile)` fixes the sequence of operation kinds for a seed (no I/O), shaped
by the seed's option config (`cdf_platform_testkit.faults.options`: which options the pipeline
uses and which kinds of operation the history must hold), and
`apply_bronze_op` draws each operation's parameters from the model's current state with the
same seeded generator, so a seed replays the same history (only the instant a concurrent commit
lands inside a run depends on timing).

Operations: insert batches, updates, updates that set NULLs, UPDATEs of the key column,
out-of-order updates (a `sequence_by` value older than the row's), deletes, re-inserts of
deleted keys, MERGE upserts (with deletes; with ARRAY and MAP columns, some rewrite a MAP's
entries in another order), full overwrite,
`replaceWhere`, an added column, an overwrite that drops or renames that column, OPTIMIZE,
checkpoints,
VACUUM with zero retention, VACUUM after aging under a one-second retention (with log cleanup
behind a checkpoint), a change-feed gap, a table recreate, and consumer runs after pauses of
varying length: plain, with a bronze commit landing during the run, or while the retention is
shorter than the pause (time-travel limit). Between runs, some histories edit the pipeline's
spec (`where`, `columns` or `keys`, `cdf_platform_testkit.faults.spec_edits`): every later run
uses the edited spec.

Example:
    >>> plan_history(7, HistoryProfile(operations=10, runs=(3, 3)))[:3]  # doctest: +SKIP
    [<Op.INSERT: 'insert'>, <Op.RUN: 'run'>, <Op.MERGE: 'merge'>]
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from cdf_platform_testkit.faults.bronze_model import (
    BASE_COLUMNS,
    EXTRA_COLUMN,
    KEY,
    NESTED_COLUMNS,
    SEQUENCE_COLUMN,
    TENANT,
    BronzeTable,
    Row,
    tenant_of,
)
from cdf_platform_testkit.faults.options import HistoryConfig, config_for
from cdf_platform_testkit.faults.spec_edits import EditKind


class Op(StrEnum):
    """One step of a history."""

    INSERT = "insert"
    UPDATE = "update"
    NULL_UPDATE = "null_update"
    KEY_UPDATE = "key_update"
    LATE_UPDATE = "late_update"
    DELETE = "delete"
    REINSERT = "reinsert"
    MERGE = "merge"
    OVERWRITE = "overwrite"
    REPLACE_WHERE = "replace_where"
    ADD_COLUMN = "add_column"
    DROP_COLUMN = "drop_column"
    RENAME_COLUMN = "rename_column"
    OPTIMIZE = "optimize"
    CHECKPOINT = "checkpoint"
    VACUUM = "vacuum"
    AGED_VACUUM = "aged_vacuum"
    CDF_GAP = "cdf_gap"
    RECREATE = "recreate"
    RUN = "run"
    RUN_WITH_COMMIT = "run_with_commit"
    RUN_SQUEEZED = "run_squeezed"
    EDIT_WHERE = "edit_where"
    EDIT_COLUMNS = "edit_columns"
    EDIT_KEYS = "edit_keys"


RUNS = (Op.RUN, Op.RUN_WITH_COMMIT, Op.RUN_SQUEEZED)
# Edits of the pipeline's spec between runs (not bronze operations), and the field each edits.
SPEC_EDITS = {
    Op.EDIT_WHERE: EditKind.WHERE,
    Op.EDIT_COLUMNS: EditKind.COLUMNS,
    Op.EDIT_KEYS: EditKind.KEYS,
}
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
    Op.NULL_UPDATE: 2,
}
# Operation kinds a config's factor adds (weight), and the one it guarantees.
_FACTOR_OPS = {"key_updates": Op.KEY_UPDATE, "sequence_by": Op.LATE_UPDATE}
_FACTOR_WEIGHT = 3
# Operations that can cost a consumer its replay window (kept out when `lost_window` is off).
_LOSING_OPS = (Op.VACUUM, Op.AGED_VACUUM, Op.CDF_GAP, Op.RECREATE)
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
        spec_edit: probability that a history holds a spec edit, and then that it holds a
            second one (each a rebuild more).
    """

    operations: int = 28
    runs: tuple[int, int] = (3, 4)
    rare: float = 0.4
    run_with_commit: float = 0.35
    run_squeezed: float = 0.15
    age_seconds: float = 1.2
    spec_edit: float = 0.3


CI_PROFILE = HistoryProfile()
FUZZ_PROFILE = HistoryProfile(operations=32, runs=(4, 6))
RARE_OPS = (Op.ADD_COLUMN, Op.AGED_VACUUM, Op.CDF_GAP, Op.RECREATE)


def plan_history(seed: int, profile: HistoryProfile) -> list[Op]:
    """The operation kinds of history `seed`: consumer runs after pauses of varying length, the
    rest weighted bronze operations plus a few rare ones, shaped by the seed's config: its
    factors add their operation kinds (and hold at least one each), a schema change is placed
    (a column added, then dropped or renamed, with a delete before and a re-insert after), and
    without `lost_window` nothing that can cost the window is drawn. Spec edits are inserted
    last (`_insert_spec_edits`)."""
    config = config_for(seed)
    rng = random.Random(seed)
    n = profile.operations
    count = rng.randint(*profile.runs)
    first = rng.randint(1, 3)
    middle = rng.sample(range(first + 1, n - 1), count - 2)
    run_slots = sorted({first, n - 1, *middle})
    losing = config.on("lost_window")
    weights = {k: w for k, w in _COMMON_WEIGHTS.items() if losing or k not in _LOSING_OPS}
    weights |= {op: _FACTOR_WEIGHT for f, op in _FACTOR_OPS.items() if config.on(f)}
    plan: list[Op] = []
    for index in range(n):
        if index in run_slots:
            draw = rng.random()
            if index == first:
                plan.append(Op.RUN)
            elif losing and draw < profile.run_squeezed:
                plan.append(Op.RUN_SQUEEZED)
            elif draw < profile.run_squeezed + profile.run_with_commit:
                plan.append(Op.RUN_WITH_COMMIT)
            else:
                plan.append(Op.RUN)
        else:
            kinds, weights_ = zip(*weights.items(), strict=True)
            plan.append(rng.choices(kinds, weights_)[0])
    free = [i for i in range(first + 1, n - 1) if plan[i] not in RUNS]
    wanted = [op for f, op in _FACTOR_OPS.items() if config.on(f)]
    if losing:
        wanted.append(rng.choice((Op.AGED_VACUUM, Op.CDF_GAP, Op.RECREATE)))
        wanted += [op for op in (Op.AGED_VACUUM, Op.CDF_GAP, Op.RECREATE) if rng.random() < 0.3]
        middle_runs = [i for i in run_slots if i not in (first, n - 1)]
        if Op.RUN_SQUEEZED not in plan and middle_runs and rng.random() < 0.5:
            plan[rng.choice(middle_runs)] = Op.RUN_SQUEEZED
    if config.schema != "none":
        _place_schema_change(plan, free, rng, config)
    for op in wanted:
        if op not in plan and free:
            slot = rng.choice(free)
            free.remove(slot)
            plan[slot] = op
    _insert_spec_edits(plan, seed, profile)
    return plan


def _insert_spec_edits(plan: list[Op], seed: int, profile: HistoryProfile) -> None:
    """With probability `profile.spec_edit` (then again, for a second), a spec edit of a kind
    drawn at random, inserted after the first run and before the last (a run follows it). Drawn
    from a generator of its own and inserted, not put in a step's place: with or without edits,
    a seed's other steps (and so its bronze history) are the same."""
    rng = random.Random(seed * 6007 + 13)
    first = next(i for i, op in enumerate(plan) if op in RUNS)
    while rng.random() < profile.spec_edit:
        edit = rng.choice(list(SPEC_EDITS))
        plan.insert(rng.randint(first + 1, len(plan) - 1), edit)
        if sum(op in SPEC_EDITS for op in plan) == 2:
            return


def _place_schema_change(
    plan: list[Op], free: list[int], rng: random.Random, config: HistoryConfig
) -> None:
    """An added column at the first free slot; for `drop`/`rename`, then in order: a run (silver
    loads the column), a delete of a row holding a value in it, the drop or rename, a run (the
    rebuild that retires the column) and a re-insert of the deleted key, so a soft-delete
    silver shows whether the re-inserted row revives the retired column's old value."""
    if not free:
        return
    added = free.pop(0)
    plan[added] = Op.ADD_COLUMN
    later = [i for i in free if i > added]
    if config.schema == "add" or len(later) < 5:
        return
    retiring = Op.DROP_COLUMN if config.schema == "drop" else Op.RENAME_COLUMN
    steps = (Op.RUN, Op.DELETE, retiring, Op.RUN, Op.REINSERT)
    for slot, op in zip(sorted(rng.sample(later, len(steps))), steps, strict=True):
        plan[slot] = op
        free.remove(slot)


def _fresh_seq(bronze: BronzeTable) -> int:
    """A `sequence_by` value newer than every value written so far: from the next version."""
    return (bronze.version + 1) * 1000


def _row(rng: random.Random, key: int, columns: list[str], seq: int = 0) -> Row:
    row: Row = {KEY: key, "name": rng.choice(NAMES), "amount": rng.randint(0, 999)}
    if TENANT in columns:
        row[TENANT] = tenant_of(key)  # no draw: the seed's other values stay as they were
    if EXTRA_COLUMN in columns:
        row[EXTRA_COLUMN] = rng.choice((None, f"n{rng.randint(0, 99)}"))
    if SEQUENCE_COLUMN in columns:
        row[SEQUENCE_COLUMN] = seq
    if NESTED_COLUMNS[0] in columns:
        row["tags"] = rng.choice((None, [], [f"t{rng.randint(0, 9)}", None]))
        entries = [(k, rng.choice((None, f"v{rng.randint(0, 9)}"))) for k in ("a", "b", "c")]
        row["attrs"] = rng.choice((None, [], entries[: rng.randint(1, 3)]))
    return row


def _reordered(row: Row) -> Row:
    """`row` with its MAP's entries in reverse order (the same value)."""
    attrs = row.get("attrs")
    return {**row, "attrs": list(reversed(attrs))} if attrs else dict(row)


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
    """Present rows for `keys`, about half of them with new values (the others as they are, or
    with a MAP's entries reordered)."""
    seq = _fresh_seq(bronze)
    return [
        _row(rng, k, bronze.columns, seq)
        if rng.random() < 0.5
        else _reordered(bronze.rows[k])
        if rng.random() < 0.5
        else dict(bronze.rows[k])
        for k in keys
    ]


def apply_bronze_op(op: Op, bronze: BronzeTable, rng: random.Random, profile: HistoryProfile) -> Op:
    """Apply `op` to bronze with parameters drawn from `rng`; return the op actually applied
    (one whose precondition fails, such as an update of an empty table, becomes an insert).
    Every row a write changes gets a `sequence_by` value newer than any before, except in an
    out-of-order update, whose values are older than the row's."""
    keys = bronze.keys()
    columns = bronze.columns
    sequenced = SEQUENCE_COLUMN in columns
    if op in (Op.UPDATE, Op.NULL_UPDATE, Op.KEY_UPDATE, Op.DELETE, Op.CDF_GAP) and not keys:
        op = Op.INSERT
    if op is Op.LATE_UPDATE and not (keys and sequenced):
        op = Op.UPDATE if keys else Op.INSERT
    if op is Op.REINSERT and not bronze.gone_keys():
        op = Op.INSERT
    if op is Op.ADD_COLUMN and EXTRA_COLUMN in columns:
        op = Op.INSERT
    if op in (Op.DROP_COLUMN, Op.RENAME_COLUMN) and EXTRA_COLUMN not in columns:
        op = Op.OVERWRITE
    fresh = _fresh_seq(bronze)

    def new_rows(keys_: list[int], columns_: list[str] = columns) -> list[Row]:
        return [_row(rng, k, columns_, fresh) for k in keys_]

    def stamped(keys_: list[int]) -> dict[int, int] | None:
        return {k: fresh for k in keys_} if sequenced else None

    if op is Op.INSERT:
        bronze.insert(new_rows(_new_keys(rng, bronze, rng.randint(1, 4))))
    elif op in (Op.UPDATE, Op.NULL_UPDATE):
        name = rng.choice(NAMES)
        targets = _present(rng, bronze, 1, 3)
        delta = rng.randint(1, 50) if op is Op.UPDATE else None
        bronze.update(targets, amount_delta=delta, name=name, seq=stamped(targets))
    elif op is Op.KEY_UPDATE:
        bronze.update_key(rng.choice(keys), _new_keys(rng, bronze, 1)[0])
    elif op is Op.LATE_UPDATE:
        targets = _present(rng, bronze, 1, 2)
        older = {k: bronze.rows[k][SEQUENCE_COLUMN] - rng.randint(1, 1500) for k in targets}
        bronze.update(targets, amount_delta=rng.randint(1, 50), name=rng.choice(NAMES), seq=older)
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
        bronze.insert(new_rows(gone[: rng.randint(1, 2)]))
    elif op is Op.MERGE:
        updated = _present(rng, bronze, 0, 2)
        deleted = [k for k in _present(rng, bronze, 0, 2) if k not in updated]
        upserts = _rewritten(rng, bronze, updated)
        upserts += new_rows(_new_keys(rng, bronze, rng.randint(0, 2)))
        if not upserts and not deleted:
            upserts = new_rows(_new_keys(rng, bronze, 1))
        bronze.merge(upserts, deleted)
    elif op is Op.OVERWRITE:
        kept = [k for k in keys if rng.random() < 0.6] if rng.random() > 0.1 else []
        rows = _rewritten(rng, bronze, kept)
        rows += new_rows(_new_keys(rng, bronze, rng.randint(0, 3)))
        bronze.overwrite(rows)
    elif op is Op.REPLACE_WHERE:
        low = rng.randint(1, KEY_POOL)
        kept = [k for k in keys if k >= low and rng.random() < 0.5]
        rows = _rewritten(rng, bronze, kept)
        new = _new_keys(rng, bronze, rng.randint(0, 2), minimum=low)
        bronze.replace_where(low, rows + new_rows(new))
    elif op is Op.ADD_COLUMN:
        if rng.random() < 0.5:
            bronze.add_column()
        else:
            bronze.add_column(new_rows(_new_keys(rng, bronze, 2), [*columns, EXTRA_COLUMN]))
    elif op in (Op.DROP_COLUMN, Op.RENAME_COLUMN):
        rows = [dict(bronze.rows[k]) for k in keys]
        bronze.overwrite_dropping_column(rows, rename=op is Op.RENAME_COLUMN)
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
        rows = _rewritten(rng, bronze, survivors) + new_rows(new)
        bronze.recreate(rows, keep_extra_column=rng.random() < 0.5)
    else:
        raise ValueError(f"{op} is not a bronze operation")
    return op


def bronze_columns(config: HistoryConfig, *, tenant: bool = False) -> list[str]:
    """The columns bronze is created with under `config` (`tenant`: with the column a keys
    edit adds to the key)."""
    columns = list(BASE_COLUMNS)
    if tenant:
        columns.append(TENANT)
    if config.on("sequence_by"):
        columns.append(SEQUENCE_COLUMN)
    if config.on("types"):
        columns += NESTED_COLUMNS
    return columns


def initial_rows(rng: random.Random, columns: list[str]) -> list[Row]:
    """The rows bronze is created with (0 to 6)."""
    keys = rng.sample(range(1, KEY_POOL + 1), rng.randint(0, 6))
    return [_row(rng, k, columns) for k in keys]
