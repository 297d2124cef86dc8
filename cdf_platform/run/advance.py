"""An advance: a range whose commits change no row (OPTIMIZE, VACUUM, property changes) moves
silver's watermark to its end in a silver commit of no data, written without Spark.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.planning.run_result import NO_ROWS
from cdf_platform.run.context import RunContext, RunOutcome
from cdf_platform.run.incremental import range_stamp
from cdf_platform.run.record import applied_outcome, record
from cdf_platform.state.watermark import advance_watermark, read_silver_state

logger = logging.getLogger(__name__)


def run_advance(run: RunContext, plan: RunPlan) -> RunOutcome | None:
    """Advance the watermark over the plan's range, stamped as an incremental commit is, and
    record it. None when silver's protocol needs Spark to write it (the caller runs the range
    as an incremental run instead)."""
    spec = plan.spec
    assert plan.start_version is not None
    start, end = plan.start_version, plan.end_version
    run.mark()
    stamp = range_stamp(run, plan, RunMode.ADVANCE)
    storage = run.control.storage
    advanced = advance_watermark(
        spec.target, stamp.app_id, stamp.version, stamp.metadata, storage=storage
    )
    if advanced is None:
        logger.info(
            "%s: silver's protocol needs Spark to write; bronze versions %d..%d (no row "
            "changed) run as an incremental run",
            spec.id,
            start,
            end,
        )
        return None
    run.lap("write")
    if advanced:
        run.committed_at = datetime.now(UTC)
    applied = (
        end if advanced else read_silver_state(spec.target, spec.id, storage=storage).watermark
    )
    if not advanced:
        logger.warning(
            "%s: a newer run already applied up to %s; nothing written", spec.id, applied
        )
    outcome = applied_outcome(plan, RunMode.ADVANCE, applied, NO_ROWS, wrote=advanced)
    record(run, plan, outcome)
    return outcome
