"""What a run writes about itself: its load-log row and the pipeline's state row (`record`), a
FAILED row for a problem it stops on (`record_incident`), the row of a silver commit the
control tables missed (`repair_control`), and the `RunResult` it returns. Each row and the
result carry the run's stage marks so far (`cdf_platform.state.load_log.RunStages`).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.core.spec.spec_fingerprint import fingerprint_of, shaping_fields
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.planning.run_result import RowCounts, RunResult
from cdf_platform.run.context import RunContext, RunOutcome
from cdf_platform.spark.table.silver_types import silver_widenings
from cdf_platform.state.load_log import LoadLogEntry
from cdf_platform.window.replay_window import assess_consumer, compute_replay_window

# The load log's incident code of a run that took a spec edit forward only.
SPEC_FORWARD_ONLY = "SPEC_FORWARD_ONLY"


def spec_note(plan: RunPlan, *, rebuilt: bool) -> str | None:
    """The load log's words on a spec edit this run took, if any: reconciled or reshaped by a
    rebuild, or taken forward only by an incremental run."""
    change, held = plan.spec_change, plan.forward_only
    if rebuilt and plan.spec_edits:
        how = (
            "rewrote silver in the new shape" if change and change.reshapes else "reconciled silver"
        )
        since = change.recorded if change is not None else held.from_fingerprint if held else None
        return (
            f"spec edit of {', '.join(plan.spec_edits)}: {how} from the bronze snapshot at version "
            f"{plan.end_version} (spec fingerprint {since} -> {plan.spec_fingerprint})"
        )
    if not rebuilt and change is not None:
        return (
            f"{change.describe()}; taken forward only (`on_spec_change: forward_only`): rows "
            f"applied up to bronze version {plan.watermark} keep the previous spec's values "
            "until the next rebuild"
        )
    return None


def applied_outcome(
    plan: RunPlan, mode: RunMode, applied: int | None, counts: RowCounts, *, wrote: bool
) -> RunOutcome:
    """The outcome of a run that applied the plan's range of the change feed (incremental, or
    an advance over commits that change no row), silver's watermark now `applied`: a spec edit
    it took forward only is noted in the load log (`SPEC_FORWARD_ONLY` when it wrote)."""
    note = spec_note(plan, rebuilt=False)
    return RunOutcome(
        mode,
        applied,
        counts,
        start=plan.start_version,
        end=plan.end_version,
        incident=SPEC_FORWARD_ONLY if note is not None and wrote else None,
        message=note,
    )


def record(run: RunContext, plan: RunPlan, outcome: RunOutcome, *, before: int | None = -1) -> None:
    """A load-log row for what the run did and the pipeline's state row; `before`: the
    watermark the row starts from, when not silver's before the run (a repair's)."""
    spec, mode, message = plan.spec, outcome.mode, outcome.message
    if mode is not RunMode.NOOP:
        # A column this run widened in silver (bronze's type widening) is said in the load log.
        widened = silver_widenings(spec.target, plan.silver.silver_version, run.control.storage)
        message = "; ".join(filter(None, (message, *(f"silver {w}" for w in widened)))) or None
    finished = run.finished_at = datetime.now(UTC)
    run.control.append_log(
        LoadLogEntry(
            run_id=run.run_id,
            pipeline_id=spec.id,
            mode=mode.value,
            outcome="REPAIRED" if mode is RunMode.NOOP else "SUCCESS",
            started_at=run.started_at,
            finished_at=finished,
            incident_code=outcome.incident,
            message=message,
            start_version=outcome.start,
            end_version=outcome.watermark_after if mode is not RunMode.NOOP else None,
            watermark_before=plan.silver.watermark if before == -1 else before,
            watermark_after=outcome.watermark_after,
            rows_inserted=outcome.counts.inserted,
            rows_updated=outcome.counts.updated,
            rows_deleted=outcome.counts.deleted,
            plan_seconds=run.timings.get("plan", 0.0),
            read_seconds=run.timings.get("read", 0.0),
            write_seconds=run.timings.get("write", 0.0),
            spec_fingerprint=plan.spec_fingerprint,
            spec=shaping_fields(spec),
            expectations=outcome.expectations.to_json() if outcome.expectations else None,
            stages=run.stages(),
        ),
        state_follows=True,
    )
    generation = plan.silver.generation if outcome.generation is None else outcome.generation
    run.control.upsert_state(
        {
            "pipeline_id": spec.id,
            "source": spec.source,
            "target": spec.target,
            "source_table_id": plan.window.table_id,
            "generation": generation,
            "last_commit_version": outcome.watermark_after,
            "last_success_at": finished,
            "last_mode": mode.value,
            "status": "OK",
            "delete_mode": spec.delete_mode.value,
            "fallback_mode": spec.fallback_mode.value,
            "max_allowed_lag_hours": spec.max_allowed_lag_hours,
            "min_headroom_hours": spec.min_headroom_hours,
            # The mirror of silver's spec record; a no-op keeps the one silver's log holds.
            **_mirrored_spec(plan, mode),
        },
    )


def _mirrored_spec(plan: RunPlan, mode: RunMode) -> dict[str, str]:
    """The state row's spec record: what this run stamped on silver, or for a no-op what
    silver's log holds (a no-op writes no commit, so an edit it did not take stays pending)."""
    spec_record = plan.spec_record if mode is not RunMode.NOOP else plan.silver.spec_record
    if spec_record is None:
        return {}
    return {"spec_fingerprint": fingerprint_of(spec_record), "spec_record": json.dumps(spec_record)}


def record_incident(
    run: RunContext, plan: RunPlan, problem: CdfPlatformError, *, mode: RunMode | None = None
) -> None:
    """A FAILED load-log row for `problem` (`mode`: what the run was doing; default: the plan's)."""
    spec = plan.spec
    mode = mode or plan.mode
    rebuilding = mode.reads_snapshot
    run.finished_at = datetime.now(UTC)
    run.control.append_log(
        LoadLogEntry(
            run_id=run.run_id,
            pipeline_id=spec.id,
            mode=mode.value,
            outcome="FAILED",
            started_at=run.started_at,
            finished_at=run.finished_at,
            incident_code=problem.incident_code,
            message=str(problem),
            start_version=None if rebuilding else plan.start_version,
            end_version=plan.end_version,
            watermark_before=plan.silver.watermark,
            watermark_after=plan.silver.watermark,
            spec_fingerprint=plan.spec_fingerprint,
            spec=shaping_fields(spec),
            stages=run.stages(),
        ),
    )


def repair_control(run: RunContext, plan: RunPlan) -> None:
    """Bring the control tables to silver's watermark when they lag it: a run whose process
    ended after its silver commit (killed, or its Spark work finished on an engine after it
    died) never recorded it. The load log gets a REPAIRED row for that commit, so every silver
    commit has its row and each row starts where the one before ended."""
    watermark = plan.silver.watermark
    state = run.control.read_states().get(plan.spec.id)
    recorded = state.get("last_commit_version") if state is not None else None
    if watermark is None or (state is not None and recorded == watermark):
        return
    last = plan.silver.last_run or {}
    note = (
        f"silver's log holds bronze versions up to {watermark} (run {last.get('run_id')}, "
        f"{last.get('mode')}) that the control tables did not record: that run ended after its "
        "silver commit"
    )
    record(run, plan, RunOutcome(RunMode.NOOP, watermark, message=note), before=recorded)


def result(run: RunContext, plan: RunPlan, outcome: RunOutcome) -> RunResult:
    """The run's result, with the consumer's lag after it (read from bronze's log unless the
    run was a no-op)."""
    if outcome.mode is RunMode.NOOP:
        lag_after = plan.assessment
    else:
        run.mark()
        now = datetime.now(UTC)
        lag_after = assess_consumer(
            compute_replay_window(plan.spec.source, now=now, storage=run.control.storage),
            outcome.watermark_after,
            now=now,
        )
        run.lap("lag_after")
    return RunResult(
        pipeline_id=plan.spec.id,
        run_id=run.run_id,
        mode=outcome.mode,
        start_version=outcome.start,
        end_version=outcome.end,
        watermark_before=plan.silver.watermark,
        watermark_after=outcome.watermark_after,
        rows_inserted=outcome.counts.inserted,
        rows_updated=outcome.counts.updated,
        rows_deleted=outcome.counts.deleted,
        duration_seconds=time.monotonic() - run.clock,
        spark_started=run.spark_started,
        lag_before=plan.assessment,
        lag_after=lag_after,
        incident_code=outcome.incident if outcome.reported else None,
        incident_message=outcome.message if outcome.reported else None,
        timings=dict(run.timings),
        expectations=outcome.expectations,
        stages=run.stages(),
    )
