"""Spec edits in the generated histories: between two consumer runs the pipeline's `where`,
`columns` or `keys` is edited, and every later run uses the edited spec. Silver records the spec
it was built under (`cdf_platform.core.spec.spec_fingerprint`), so the next run reconciles silver
with a pinned bronze snapshot under the new spec (`where`, `columns`), or rewrites it in the new
shape (`keys`; refused for an SCD2 history, whose closed versions a snapshot cannot rebuild).

The row-shaping part of a history's spec is a `SpecShape`: the row filter, the derived columns
in order, the keys, and a `quarantine` expectation. Every SQL expression an edit can put in it
has a Python twin here (`WHERES`, `EXPRESSIONS`, `EXPECTATIONS`), which the oracles apply to
bronze rows
(`cdf_platform_testkit.faults.change_oracle.conform_row`): after a run, silver is the oracle of
the *new* spec applied to bronze.

Edits (`SpecShape.edited`, parameters drawn from the harness's own generator):
- `where`: another filter of `WHERES`, or none (a NULL condition drops the row);
- `columns`: a derived column's expression changed (`big`'s threshold), one added
  (`amount_x2`) or one removed;
- `keys`: [id] -> [id, tenant], or back. `tenant` (`id % 3`,
  `cdf_platform_testkit.faults.bronze_model.tenant_of`) is a bronze column written only in
  histories that edit keys: never NULL, unique with `id`, and never changed while `id` is not
  (an UPDATE of the key column sets both), so the composite key names the same rows as `id`.

Example:
    >>> shape = SpecShape(WHERE, tuple(DERIVED.items()))
    >>> shape.edited(EditKind.KEYS, random.Random(1))[0].keys
    ('id', 'tenant')
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from cdf_platform_testkit.faults.bronze_model import KEY, TENANT, Row

TENANT_KEYS = (KEY, TENANT)
# The filter and derived columns of a history with `conform: on`, before any edit.
WHERE = "coalesce(amount, 1) % 5 != 0"
DERIVED = {"id_band": "id % 4", "big": "amount >= 500"}


def _amount(function: Callable[[int], Any]) -> Callable[[Row], Any]:
    """A twin over `amount` that is NULL when `amount` is (as SQL's operators are)."""
    return lambda row: None if row.get("amount") is None else function(row["amount"])


# Row filters and their twins: whether the row is kept (a NULL condition drops it).
WHERES: dict[str, Callable[[Row], bool]] = {
    WHERE: lambda row: (1 if row.get("amount") is None else row["amount"]) % 5 != 0,
    "amount < 700": lambda row: row.get("amount") is not None and row["amount"] < 700,
}
# The expectation of a history with `conform: on` (a `quarantine` rule, judged after the
# derived columns) and its twin: whether the row passes (it never evaluates to NULL).
QUARANTINE_RULE = "not_sevens"
EXPECTATION = "amount IS NULL OR amount % 7 != 3"
EXPECTATIONS: dict[str, Callable[[Row], bool]] = {
    EXPECTATION: lambda row: row.get("amount") is None or row["amount"] % 7 != 3,
}
# Derived-column expressions and their twins (amounts are never negative: `%` agrees).
EXPRESSIONS: dict[str, Callable[[Row], Any]] = {
    "id % 4": lambda row: row[KEY] % 4,
    "amount >= 500": _amount(lambda amount: amount >= 500),
    "amount >= 250": _amount(lambda amount: amount >= 250),
    "amount * 2": _amount(lambda amount: amount * 2),
}
# The `columns` edits: `big`'s other threshold, and the column an edit may add.
OTHER_THRESHOLD = {"amount >= 500": "amount >= 250", "amount >= 250": "amount >= 500"}
ADDED = ("amount_x2", "amount * 2")


class EditKind(StrEnum):
    """Which row-shaping field an edit changes."""

    WHERE = "where"
    COLUMNS = "columns"
    KEYS = "keys"


@dataclass(frozen=True)
class SpecShape:
    """The row-shaping fields the histories edit: `where`, `columns` (pairs, in order) and
    `keys`."""

    where: str | None = None
    derived: tuple[tuple[str, str], ...] = ()
    keys: tuple[str, ...] = (KEY,)
    expectation: str | None = None

    def fields(self) -> dict[str, Any]:
        """The PipelineSpec fields of this shape (defaults left out)."""
        fields: dict[str, Any] = {"keys": list(self.keys)}
        if self.derived:
            fields["columns"] = dict(self.derived)
        if self.where is not None:
            fields["where"] = self.where
        if self.expectation is not None:
            rule = {"name": QUARANTINE_RULE, "rule": self.expectation, "action": "quarantine"}
            fields["expectations"] = [rule]
        return fields

    def conform(self, row: Row) -> tuple[Row, bool]:
        """`row` with the derived columns (each over the row as it comes in), and whether
        `where` keeps it and it passes the expectation (a failing row is quarantined: kept out
        of silver as `where` keeps rows out)."""
        out = dict(row)
        for name, expression in self.derived:
            out[name] = EXPRESSIONS[expression](row)
        kept = self.where is None or WHERES[self.where](row)
        return out, kept and self.passes(out)

    def passes(self, row: Row) -> bool:
        """Whether `row` passes the shape's expectation (True without one)."""
        return self.expectation is None or EXPECTATIONS[self.expectation](row)

    def warned(self) -> SpecShape:
        """This shape with its `quarantine` rule as a `warn` one: what silver and the
        quarantine together hold."""
        return replace(self, expectation=None)

    def edited(self, kind: EditKind, rng: random.Random) -> tuple[SpecShape, str]:
        """This shape with one edit of `kind` drawn from `rng`, and a word on it."""
        if kind is EditKind.WHERE:
            where = rng.choice([w for w in (None, *WHERES) if w != self.where])
            return replace(self, where=where), f"where {self.where!r} -> {where!r}"
        if kind is EditKind.KEYS:
            keys = (KEY,) if self.keys == TENANT_KEYS else TENANT_KEYS
            return replace(self, keys=keys), f"keys {list(self.keys)} -> {list(keys)}"
        derived = dict(self.derived)
        choices: list[tuple[str, str | None]] = [(name, None) for name in derived]
        if derived.get("big") in OTHER_THRESHOLD:
            choices.append(("big", OTHER_THRESHOLD[derived["big"]]))
        if ADDED[0] not in derived:
            choices.append(ADDED)
        name, expression = rng.choice(choices)
        if expression is None:
            del derived[name]
            word = f"columns: {name} removed"
        else:
            word = f"columns: {name} = {expression!r} (was {derived.get(name)!r})"
            derived[name] = expression
        return replace(self, derived=tuple(derived.items())), word

    @property
    def derived_columns(self) -> list[str]:
        """The derived columns' names, in order."""
        return [name for name, _ in self.derived]
