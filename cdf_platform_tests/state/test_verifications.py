"""The verification log: appended JVM-free, read back, and where foreign-write searches start."""

from __future__ import annotations

from pathlib import Path

from cdf_platform.state.control import ControlTable
from cdf_platform.state.verifications import (
    Verification,
    VerificationOutcome,
    last_verified_silver_version,
    read_verifications,
    record_verification,
)


def test_the_last_settled_verification_is_where_the_search_starts(tmp_path: Path) -> None:
    control = ControlTable(str(tmp_path / "_control"))
    assert last_verified_silver_version(control, "orders") is None
    record_verification(
        control,
        Verification(
            "orders", "r1", bronze_version=3, silver_version=5, outcome=VerificationOutcome.EQUAL
        ),
    )
    record_verification(
        control,
        Verification(
            "other", "r2", bronze_version=9, silver_version=40, outcome=VerificationOutcome.EQUAL
        ),
    )
    assert last_verified_silver_version(control, "orders") == 5
    # A difference left unrepaired vouches for nothing: the search keeps starting at 5.
    record_verification(
        control,
        Verification(
            "orders",
            "r3",
            bronze_version=4,
            silver_version=8,
            outcome=VerificationOutcome.DIFFERENT,
            differing_keys=2,
            sample_keys='[{"id": 1}, {"id": 2}]',
        ),
    )
    assert last_verified_silver_version(control, "orders") == 5
    record_verification(
        control,
        Verification(
            "orders",
            "r4",
            bronze_version=4,
            silver_version=8,
            outcome=VerificationOutcome.REPAIRED,
            differing_keys=2,
            repaired_silver_version=9,
        ),
    )
    assert last_verified_silver_version(control, "orders") == 9
    found = read_verifications(control, "orders")
    assert [(v.run_id, v.outcome, v.differing_keys) for v in found] == [
        ("r1", VerificationOutcome.EQUAL, 0),
        ("r3", VerificationOutcome.DIFFERENT, 2),
        ("r4", VerificationOutcome.REPAIRED, 2),
    ]
