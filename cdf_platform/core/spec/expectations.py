"""Expectations: named data-quality rules on the row silver would hold, each with an action.

A rule is a Spark SQL boolean expression over the row after the spec's `transform`, `columns`
and `where` (so it sees derived columns, and rows `where` keeps out are never judged). A row
passes when the rule is true; false or NULL fails it (as `where` counts NULL as false).

| action | the failing row | the run |
|---|---|---|
| `warn` | written to silver | counts it |
| `drop` | kept out of silver as `where` keeps it out (a key already there leaves) | counts it |
| `quarantine` | as `drop`, and held in the pipeline's quarantine table | counts it |
| `fail` | | refuses with `DataQualityError`, writing nothing |

A row failing a `drop` rule is dropped, not quarantined. `drop` and `quarantine` rules shape
silver's rows, so they are part of the spec fingerprint (an edit reconciles silver); `warn` and
`fail` rules are not.

Example:
    >>> rule = Expectation(name="positive_amount", rule="amount > 0", action="quarantine")
    >>> rule.shapes_rows, rule.action.value
    (True, 'quarantine')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

EXPECTATION_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class ExpectationAction(StrEnum):
    """What a row failing an expectation does."""

    WARN = "warn"
    """The row is written; the failing rows are counted."""
    DROP = "drop"
    """The row is kept out of silver, as `where` keeps it out."""
    QUARANTINE = "quarantine"
    """As `drop`, and the row goes to the pipeline's quarantine table."""
    FAIL = "fail"
    """The run refuses with `DataQualityError` and writes nothing."""


ROW_SHAPING_ACTIONS = frozenset({ExpectationAction.DROP, ExpectationAction.QUARANTINE})


class Expectation(BaseModel):
    """One named rule of a pipeline (`PipelineSpec.expectations`).

    Example:
        >>> Expectation(name="has_email", rule="email IS NOT NULL").action
        <ExpectationAction.WARN: 'warn'>
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Rule name: lowercase letters, digits, `_`; unique per spec.")
    rule: str = Field(
        description="A Spark SQL boolean expression over the row silver would hold (after "
        "`transform`, `columns` and `where`); false or NULL fails the row."
    )
    action: ExpectationAction = Field(
        default=ExpectationAction.WARN,
        description="`warn` (write and count), `drop` (keep out of silver), `quarantine` (keep "
        "out of silver, hold in the quarantine table) or `fail` (refuse the run).",
    )
    warn_above: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="The rule's asset check warns when the fraction of failing rows in a run "
        "is above this.",
    )
    error_above: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="The rule's asset check is an error when the fraction is above this "
        "(default: never; a `fail` rule's refusal always is).",
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not EXPECTATION_NAME.match(value):
            raise ValueError(
                f"expectation name {value!r} must match {EXPECTATION_NAME.pattern} "
                "(it names an asset check)"
            )
        return value

    @field_validator("rule")
    @classmethod
    def _check_rule(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("an expectation's rule is empty")
        return value.strip()

    @model_validator(mode="after")
    def _check_fractions(self) -> Expectation:
        if self.error_above is not None and self.error_above < self.warn_above:
            raise ValueError(
                f"expectation {self.name!r}: error_above ({self.error_above}) is below "
                f"warn_above ({self.warn_above})"
            )
        return self

    @property
    def shapes_rows(self) -> bool:
        """Whether a failing row is kept out of silver (`drop`, `quarantine`)."""
        return self.action in ROW_SHAPING_ACTIONS


def check_unique_names(expectations: list[Expectation]) -> list[Expectation]:
    """`expectations`, refused when two share a name."""
    names = [e.name for e in expectations]
    if repeated := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"expectations named twice: {repeated}")
    return expectations


@dataclass(frozen=True)
class ExpectationCounts:
    """How many judged rows a run (or rebuild) saw, and how many failed each rule.

    Attributes:
        judged: Row images judged (those `where` kept).
        failing: Rule name -> rows failing it, for every rule of the spec.
    """

    judged: int
    failing: dict[str, int] = field(default_factory=dict)

    def fraction(self, rule: str) -> float:
        """The fraction of judged rows failing `rule` (0 when nothing was judged)."""
        return self.failing.get(rule, 0) / self.judged if self.judged else 0.0

    def to_json(self) -> str:
        """The counts as the load log keeps them."""
        return json.dumps({"judged": self.judged, "failing": self.failing}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> ExpectationCounts | None:
        """The counts `to_json` wrote (None for None or a row written without them)."""
        if not text:
            return None
        value: dict[str, Any] = json.loads(text)
        return cls(int(value["judged"]), {k: int(v) for k, v in value["failing"].items()})
