"""A run that reads a bronze snapshot: an initial load, a snapshot source's run, or a rebuild
(requested, or the repair of a problem the plan or the read met), reconciling silver with
bronze at the plan's pinned version in one stamped commit.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cdf_platform.core.errors import CdfPlatformError, SourceReset, SpecChanged
from cdf_platform.core.spec.spec_fingerprint import EXACT_FIELDS
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.run.context import RunContext, RunOutcome
from cdf_platform.run.record import record, record_incident, spec_note
from cdf_platform.spark.reconcile.rebuild import RebuildRequest, SpecRewrite
from cdf_platform.spark.write.metrics import silver_commit_counts

if TYPE_CHECKING:
    from cdf_platform.run.strategy import WriteStrategy
    from cdf_platform.spark.reconcile.rebuild import RebuildOutcome

logger = logging.getLogger(__name__)


def run_snapshot(
    run: RunContext,
    plan: RunPlan,
    strategy: WriteStrategy,
    problem: CdfPlatformError | None,
    *,
    requested: bool,
) -> RunOutcome:
    """Reconcile silver with bronze at the plan's end version and record it; `problem`: what
    the rebuild repairs (None: a planned snapshot read, or a requested rebuild).

    Raises:
        CdfPlatformError: the snapshot read or the write failed (its FAILED row written).
    """
    spec = plan.spec
    # The planned snapshot read keeps its name; a requested one, or an incremental run falling
    # back, is a rebuild.
    mode = plan.mode if plan.mode.reads_snapshot and not requested else RunMode.REBUILD
    # Pin V first, from the log: commits landing from now on wait for the next incremental run.
    version = plan.end_version
    if problem is not None:
        # One line: the whole message (with what to do) is the load log's and the run's.
        logger.warning(
            "%s: %s (%s); rebuilding from bronze version %d",
            spec.id,
            type(problem).__name__,
            problem.incident_code,
            version,
        )
    spark = run.spark
    run.mark()
    try:
        written = strategy.reconcile(spark, _request(run, plan, mode, problem))
    except CdfPlatformError as err:
        record_incident(run, plan, err, mode=mode)
        raise
    # The snapshot's read is part of its write: a snapshot run marks no `read`.
    run.committed_at = datetime.now(UTC)
    run.lap("write")
    counts = silver_commit_counts(
        spark, spec.target, spec.id, run.run_id, spec.delete_mode, storage=run.control.storage
    )
    incident = (
        problem.incident_code if problem is not None else ("MANUAL_REBUILD" if requested else None)
    )
    outcome = RunOutcome(
        mode,
        version,
        counts,
        end=version,
        incident=incident,
        message=_message(plan, strategy, mode, problem, written),
        generation=written.generation,
        reported=True,
        expectations=written.counts,
    )
    record(run, plan, outcome)
    return outcome


def _request(
    run: RunContext, plan: RunPlan, mode: RunMode, problem: CdfPlatformError | None
) -> RebuildRequest:
    version = plan.end_version
    return RebuildRequest(
        version=version,
        silver=plan.silver,
        run_id=run.run_id,
        mode=mode.value,
        source_table_id=plan.window.table_id,
        storage=run.control.storage,
        source_reset=isinstance(problem, SourceReset),
        version_timestamp=plan.window.timestamp_of(version),
        rewrite=_spec_rewrite(plan),
    )


def _spec_rewrite(plan: RunPlan) -> SpecRewrite:
    """How a rebuild of `plan` follows the spec edits silver has not taken (or took forward
    only): reshape for keys, history or delete mode, exact values where a value-keeping rule
    changed, deletion vectors set when that field changed."""
    change, fields = plan.spec_change, set(plan.spec_edits)
    return SpecRewrite(
        record=plan.spec_record,
        reshape=change is not None and change.reshapes,
        exact=bool(fields & EXACT_FIELDS),
        deletion_vectors=plan.spec.deletion_vectors if "deletion_vectors" in fields else None,
    )


def _message(
    plan: RunPlan,
    strategy: WriteStrategy,
    mode: RunMode,
    problem: CdfPlatformError | None,
    written: RebuildOutcome,
) -> str | None:
    """The load log's words on the run: the problem it repaired, what an SCD2 history misses
    (`WriteStrategy.history_note`), the spec edit it took, and what the write says of itself."""
    message = str(problem) if problem is not None else None
    missed = strategy.history_note(plan.silver.watermark, plan.end_version, mode)
    message = "; ".join(filter(None, (message, missed))) or None
    if isinstance(problem, SpecChanged):
        message = None  # the note says what the run did; the problem's remedy is done
    message = "; ".join(filter(None, (message, spec_note(plan, rebuilt=True), written.note)))
    return message or None
