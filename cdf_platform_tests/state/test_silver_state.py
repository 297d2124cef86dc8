"""Silver's state read from its newest commits (what a sensor reads per pipeline on every tick)
equals the state read from the whole table, and is used only when those commits hold it: a
generation bump, maintenance commits past the scan and an unstamped commit fall back to the
whole table's state. JVM-free: silver tables written by `deltalake` with the platform's stamp
(a txn action and the run's `userMetadata` in one commit)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from cdf_platform.core.storage import ENVIRONMENT_ONLY
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.state.watermark import (
    NEWEST_SCAN,
    SilverState,
    _from_newest_commits,
    _from_table_state,
    app_id,
    read_silver_state,
    user_metadata,
)

PIPELINE = "orders"


def commit(table: Path, row: int, *, stamp: tuple[int, int] | None, described: bool = True) -> None:
    """Append one row to `table`; `stamp` (generation, watermark) adds the platform's txn, and
    `described` its run description beside it."""
    transactions = []
    metadata = {}
    if stamp is not None:
        generation, watermark = stamp
        transactions = [Transaction(app_id(PIPELINE, generation), watermark)]
        if described:
            metadata = {
                "userMetadata": user_metadata(
                    pipeline_id=PIPELINE, end_version=watermark, generation=generation
                )
            }
    write_deltalake(
        str(table),
        pa.table({"id": [row]}),
        mode="append",
        commit_properties=CommitProperties(
            app_transactions=transactions or None, custom_metadata=metadata or None
        ),
    )


def states(table: Path) -> tuple[SilverState | None, SilverState]:
    """The state from the newest commits (None: not there) and from the whole table."""
    return _from_newest_commits(DeltaLog(str(table)), PIPELINE), _from_table_state(
        str(table), PIPELINE, ENVIRONMENT_ONLY
    )


def test_newest_commits_give_the_whole_tables_state(tmp_path: Path) -> None:
    silver = tmp_path / "silver"
    for row, watermark in enumerate((3, 5, 9)):
        commit(silver, row, stamp=(0, watermark))
    fast, exact = states(silver)
    assert fast == exact == read_silver_state(str(silver), PIPELINE)
    assert (exact.watermark, exact.generation, exact.silver_version) == (9, 0, 2)

    # A rebuild after a source reset writes the next generation, from a lower watermark.
    commit(silver, 3, stamp=(1, 2))
    fast, exact = states(silver)
    assert fast == exact
    assert (exact.watermark, exact.generation) == (2, 1)
    assert exact.last_run is not None and exact.last_run["end_version"] == 2


def test_commits_the_scan_cannot_vouch_for_fall_back_to_the_table(tmp_path: Path) -> None:
    silver = tmp_path / "silver"
    commit(silver, 0, stamp=(0, 4))
    for row in range(1, NEWEST_SCAN + 1):  # maintenance-like commits without a stamp
        commit(silver, row, stamp=None)
    fast, exact = states(silver)
    assert fast is None
    assert read_silver_state(str(silver), PIPELINE) == exact
    assert (exact.watermark, exact.silver_version) == (4, NEWEST_SCAN)

    # A stamp without the run's description is not a platform commit as the platform writes
    # them: the whole table decides.
    stamped = tmp_path / "stamped"
    commit(stamped, 0, stamp=(0, 4))
    commit(stamped, 1, stamp=(0, 6), described=False)
    fast, exact = states(stamped)
    assert fast is None
    assert read_silver_state(str(stamped), PIPELINE) == exact
    assert exact.watermark == 6


def test_no_table_is_no_state(tmp_path: Path) -> None:
    state = read_silver_state(str(tmp_path / "absent"), PIPELINE)
    assert (state.exists, state.watermark) == (False, None)
