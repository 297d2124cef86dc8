"""Caught-up pipelines remembered between the incremental sensor's ticks (no Dagster, no JVM).

A caught-up pipeline's decision (`CaughtUp`) follows from bronze's and silver's logs, the
control table's row for the pipeline and its spec alone: no clock enters it (a replay window
can only break after the watermark, and a caught-up watermark is bronze's latest version). A
tick over an idle fleet would otherwise read and parse every log, and list every table's data
files, to decide again what it decided seconds before (`python -m bench.idle_cost`).
`CaughtUpMemo` lists each pipeline's two `_delta_log` folders (one request each, what an
assessment starts with) and assesses a pipeline again only when a listing (a commit, a
checkpoint, log cleanup, a table replaced: every file's name and modification time) or the
control row differs from its last caught-up decision's, or when that decision is
`REASSESS_AFTER_S` old. The listings are taken before the assessment they key: a commit landing
in between is in the assessment, not in the key, and the next tick's listing differs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.table_storage import open_storage
from cdf_platform.planning.assessment import ControlReads
from cdf_platform.planning.run_requests import CaughtUp, HeldBack, Log, WantedRun, wanted_run
from cdf_platform.state import catalog_names
from cdf_platform.state.control import ControlTable

# A caught-up decision is taken again at least this often, even with the same listings: an
# object store reports modification times to the second, so a table replaced within the second
# by one with as many commits would list the same.
REASSESS_AFTER_S = 60.0

Listing = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class _Decided:
    """A caught-up decision and what it was taken on."""

    key: tuple[str, str, Listing, Listing, dict[str, Any] | None]
    at: float
    decision: CaughtUp


class CaughtUpMemo:
    """`wanted_run`, with each pipeline's caught-up decision kept while its logs and control row
    stay as they were (see module doc); one per incremental sensor, between its ticks.

    Args:
        reassess_after_s: How old a kept decision may be.
        clock: Seconds, monotonic (tests pass their own).

    Example:
        >>> CaughtUpMemo().kept
        0
    """

    def __init__(
        self,
        *,
        reassess_after_s: float = REASSESS_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._after = reassess_after_s
        self._clock = clock
        self._decided: dict[str, _Decided] = {}

    @property
    def kept(self) -> int:
        """How many pipelines have a caught-up decision kept."""
        return len(self._decided)

    def wanted_run(
        self, spec: PipelineSpec, control: ControlTable, reads: ControlReads, log: Log
    ) -> WantedRun | CaughtUp | HeldBack | None:
        """`wanted_run(spec, control, reads, log)`, or the pipeline's kept caught-up decision
        when its logs list and its control row reads as when that was taken."""
        key = _key(spec, control, reads)
        now = self._clock()
        kept = self._decided.get(spec.id)
        if key is not None and kept is not None and kept.key == key and now - kept.at < self._after:
            return kept.decision
        decided = wanted_run(spec, control, reads, log)
        if key is not None and isinstance(decided, CaughtUp):
            self._decided[spec.id] = _Decided(key, now, decided)
        else:
            self._decided.pop(spec.id, None)
        return decided


def _key(
    spec: PipelineSpec, control: ControlTable, reads: ControlReads
) -> tuple[str, str, Listing, Listing, dict[str, Any] | None] | None:
    """What a caught-up decision of `spec` is taken on: its located tables, both logs' listings
    and its control row; None when there is none to take (a name not located, a listing that
    failed: the assessment says why)."""
    try:
        located = catalog_names.locate(spec, control, recorded=reads.recorded)
        return (
            located.source,
            located.target,
            _listing(located.source, control.storage),
            _listing(located.target, control.storage),
            reads.states.get(spec.id),
        )
    except CdfPlatformError:  # TableNameNotLocated among them
        return None


def _listing(location: str, storage: StorageConfig) -> Listing:
    """Every file in `location`'s `_delta_log`, by name and modification time (ms)."""
    files = open_storage(location, storage).list_log()
    return tuple(sorted((file.name, file.modified_ms) for file in files))
