"""The verification log: one row per comparison of a silver table with its spec applied to a
pinned bronze version (`cdf-platform verify`, the verify job), in the control root's
`verifications` table. Append only, JVM-free.

What it is for: the silver version of the newest verification that left silver equal to its
spec (found equal, or repaired) is where the search for foreign writes starts
(`last_verified_silver_version`); a commit before it has been looked at already.

Example:
    >>> record_verification(control, Verification(  # doctest: +SKIP
    ...     pipeline_id="orders", run_id="r1", bronze_version=12, silver_version=30,
    ...     outcome=VerificationOutcome.EQUAL))
    >>> last_verified_silver_version(control, "orders")  # doctest: +SKIP
    30
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cdf_platform.state.control import ControlTable

VERIFICATION_SCHEMA: dict[str, str] = {
    "pipeline_id": "string",
    "run_id": "string",
    "verified_at": "timestamp",
    "outcome": "string",
    # The pinned bronze version the spec was applied to, and the silver version compared.
    "bronze_version": "long",
    "silver_version": "long",
    # Keys whose rows differ, and a few of them (a JSON list of key objects).
    "differing_keys": "long",
    "sample_keys": "string",
    # The silver version the repair committed (None: not repaired).
    "repaired_silver_version": "long",
    "seconds": "double",
    "message": "string",
}


class VerificationOutcome(StrEnum):
    """What a verification found."""

    EQUAL = "EQUAL"
    """Silver equals its spec applied to bronze; nothing was written."""
    DIFFERENT = "DIFFERENT"
    """Some keys differ; silver was left as it was (a repair was not asked for)."""
    REPAIRED = "REPAIRED"
    """Some keys differed, and the repair reconciled them: silver now equals its spec."""


@dataclass(frozen=True)
class Verification:
    """One verification-log row (`VERIFICATION_SCHEMA`)."""

    pipeline_id: str
    run_id: str
    bronze_version: int
    silver_version: int
    outcome: VerificationOutcome
    differing_keys: int = 0
    sample_keys: str | None = None
    repaired_silver_version: int | None = None
    seconds: float | None = None
    message: str | None = None
    verified_at: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def settled_version(self) -> int | None:
        """The silver version this verification vouches for (None: it left a difference)."""
        if self.outcome is VerificationOutcome.REPAIRED:
            return self.repaired_silver_version
        return self.silver_version if self.outcome is VerificationOutcome.EQUAL else None


def verifications_path(control: ControlTable) -> str:
    """The verification log's location (created by the first verification recorded)."""
    return f"{control.root}/verifications"


def record_verification(control: ControlTable, verification: Verification) -> None:
    """Append one verification-log row."""
    row: dict[str, Any] = {**asdict(verification), "outcome": verification.outcome.value}
    control.append_row(verifications_path(control), VERIFICATION_SCHEMA, row)


def read_verifications(control: ControlTable, pipeline_id: str) -> list[Verification]:
    """`pipeline_id`'s verifications, oldest first."""
    rows = control.query(verifications_path(control), "SELECT * FROM t ORDER BY verified_at")
    return [
        Verification(**{**row, "outcome": VerificationOutcome(row["outcome"])})
        for row in rows
        if row["pipeline_id"] == pipeline_id
    ]


def last_verified_silver_version(control: ControlTable, pipeline_id: str) -> int | None:
    """The silver version of `pipeline_id`'s newest verification that left silver equal to its
    spec (None: none did). A verification that found a difference and left it moves nothing:
    what it found is still there to report."""
    settled = [v.settled_version for v in read_verifications(control, pipeline_id)]
    return max((v for v in settled if v is not None), default=None)


def last_verified_silver_versions(control: ControlTable) -> dict[str, int]:
    """`last_verified_silver_version` of every pipeline that has one, from one read of the
    verification log (status over a fleet reads it once, not once per pipeline)."""
    rows = control.query(verifications_path(control), "SELECT * FROM t")
    settled: dict[str, int] = {}
    for row in rows:
        version = Verification(
            **{**row, "outcome": VerificationOutcome(row["outcome"])}
        ).settled_version
        pipeline = str(row["pipeline_id"])
        if version is not None and version > settled.get(pipeline, -1):
            settled[pipeline] = version
    return settled
