"""The `consumer_lag`, `replay_window` and `foreign_writes` checks of every silver asset,
evaluated together.

- `consumer_lag`: how far silver is behind bronze, counted from the first bronze commit silver
  has not applied (docs/design.md section 4): versions L - W, the data-changing ones among them,
  and hours since commit W + 1. Fails with severity ERROR above `max_allowed_lag_hours`.
- `replay_window`: whether the first unapplied bronze commit is still inside the exact replay
  window with at least `min_headroom_hours` to spare; WARN below that headroom, ERROR once the
  window is lost (or a problem blocks every run). It is blocking: a run that includes it does
  not materialize silver's downstream assets after an ERROR. The rebuild sensor reads it.

- `foreign_writes`: whether silver's log holds a commit that changes data and that the
  platform did not stamp, since the last verified version or rebuild
  (`cdf_platform.planning.foreign_writes`): WARN, ERROR for a `FAIL_FAST` pipeline. Silver may
  then differ from its spec applied to bronze; nothing is changed automatically.

The results are built for a `CheckTarget` (the asset, what it reads, its limits), so consumer
assets of the watermark IO manager report the same figures (`orchestration.sensors.consumers`).

One `multi_asset_check` per pipeline computes the pipeline's status once (bronze's log read
once, the same assessment a run plans from) and reports all three. Never starts Spark.

Each evaluation's numbers are the figures the check's page plots (`orchestration.shared.figures`):
lag in versions and hours for `consumer_lag`, headroom hours and the earliest replayable
version for `replay_window`, and the watermark on both. On `consumer_lag` its steps show each
run silver applied, so a lag that grows under a flat watermark reads as silver stopped, not
bronze speeding up; on `replay_window` it is read against the earliest replayable version
(the window is lost once that passes watermark + 1). The limit and bronze's latest version are
text: one is constant and the other only grows, so plotted they would say nothing.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.checks.expectation_checks import expectation_checks
from cdf_platform.orchestration.shared.figures import count, hours, limit, text
from cdf_platform.orchestration.shared.keys import CHECKS_QUEUE, QUEUE_TAG, silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.planning.assessment import ControlReads
from cdf_platform.planning.repair import repair_decision
from cdf_platform.planning.status import (
    PipelineStatus,
    SpecState,
    WindowState,
    pipeline_status,
)

CONSUMER_LAG = "consumer_lag"
REPLAY_WINDOW = "replay_window"
FOREIGN_WRITES = "foreign_writes"


@dataclass(frozen=True)
class CheckTarget:
    """What the two checks are about: the consumer asset, what it reads, and its limits.

    Attributes:
        key: The consumer's asset key (the checks' asset).
        consumer: How descriptions name it ("silver", "gold/revenue").
        source: How descriptions name what it reads ("bronze", "silver/orders").
        max_allowed_lag_hours: consumer_lag fails above this lag.
        min_headroom_hours: replay_window warns below this headroom.
        fail_fast: whether a problem waits for a person (a pending spec edit is an error).
        replays: whether its runs replay what it reads after its watermark (a change feed);
            a snapshot source's (`changes: snapshots`) do not: no replay window is kept for it.
    """

    key: dg.AssetKey
    consumer: str
    source: str
    max_allowed_lag_hours: float
    min_headroom_hours: float
    fail_fast: bool = False
    replays: bool = True

    @classmethod
    def of_pipeline(cls, spec: PipelineSpec) -> "CheckTarget":
        """A pipeline's silver asset, reading bronze."""
        return cls(
            silver_key(spec.id),
            "silver",
            "bronze",
            spec.max_allowed_lag_hours,
            spec.min_headroom_hours,
            not repair_decision(spec.fallback_mode).automatic,
            spec.changes.replays_history,
        )


def _target(target: "PipelineSpec | CheckTarget") -> CheckTarget:
    return target if isinstance(target, CheckTarget) else CheckTarget.of_pipeline(target)


def _result(check: str, target: CheckTarget, **fields: Any) -> dg.AssetCheckResult:
    """A result of `check` on the target's asset (named: one op reports both checks)."""
    return dg.AssetCheckResult(asset_key=target.key, check_name=check, **fields)


def consumer_lag_result(
    target: PipelineSpec | CheckTarget, status: PipelineStatus
) -> dg.AssetCheckResult:
    """The check result for `status` (a pipeline's, or a consumer's on one input): lag figures
    plotted, the limit as text."""
    target = _target(target)
    metadata: dict[str, dg.MetadataValue] = {
        "version_lag": count(status.version_lag),
        "data_version_lag": count(status.data_version_lag),
        "lag_hours": hours(status.lag_hours),
        "watermark": count(status.watermark),
        "latest_version": text(status.latest_version),
        "limit": limit("fails above", target.max_allowed_lag_hours, "max_allowed_lag_hours"),
        "state": text(status.state.value),
        **spec_metadata(status),
    }
    if status.state is WindowState.SOURCE_MISSING:
        return _result(
            CONSUMER_LAG,
            target,
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"{target.source} is missing, lag unknown: {status.problem}",
            metadata=metadata,
        )
    if status.lag_exceeded:
        return _result(
            CONSUMER_LAG,
            target,
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=(
                f"{target.consumer} is {status.lag_hours:.2f} h behind {target.source} "
                f"(allowed: {target.max_allowed_lag_hours:g} h): {status.version_lag} versions, "
                f"{status.data_version_lag} with data, after watermark {status.watermark}"
            ),
            metadata=metadata,
        )
    versions = "version" if status.version_lag == 1 else "versions"
    return _result(
        CONSUMER_LAG,
        target,
        passed=True,
        description=f"{status.version_lag} {versions} ({status.lag_hours or 0:.2f} h) behind",
        metadata=metadata,
    )


# The states whose replay_window evaluation headroom decides.
_JUDGED_BY_HEADROOM = (WindowState.OK, WindowState.LOW_HEADROOM, WindowState.NOT_STARTED)


def replay_window_result(
    target: PipelineSpec | CheckTarget, status: PipelineStatus
) -> dg.AssetCheckResult:
    """The check result for `status`: window figures plotted, the limit as text."""
    target = _target(target)
    headroom = status.headroom_hours
    metadata: dict[str, dg.MetadataValue] = {
        # None for a snapshot source, which replays no history: left out, not plotted.
        **(
            {"earliest_replayable_version": count(status.earliest_replayable_version)}
            if status.earliest_replayable_version is not None or target.replays
            else {}
        ),
        "watermark": count(status.watermark),
        # The headroom every view shows (a caught-up consumer's is the retention horizon; left
        # out when there is none), and the headroom bronze's next commit will start with.
        # A snapshot source replays no history: no headroom either.
        **({"headroom_hours": hours(headroom)} if headroom is not None and target.replays else {}),
        "retention_horizon_hours": hours(status.retention_horizon_hours),
        # Text, not plotted; the rebuild sensor's run key reads it.
        "latest_version": text(status.latest_version),
        # The headroom limit, where headroom is what the evaluation judges (not beside a lost
        # window or a missing table, which fail for another reason).
        **(
            {"limit": limit("warns below", target.min_headroom_hours, "min_headroom_hours")}
            if status.state in _JUDGED_BY_HEADROOM
            else {}
        ),
        "replayable": dg.MetadataValue.bool(status.replayable),
        "state": text(status.state.value),
        "problem_code": text(status.problem_code),
        **spec_metadata(status),
    }
    failed: dict[WindowState, tuple[dg.AssetCheckSeverity, str]] = {
        # The next run reconciles silver (a FAIL_FAST pipeline's run refuses: an error then).
        WindowState.SPEC_CHANGED: (
            dg.AssetCheckSeverity.ERROR if target.fail_fast else dg.AssetCheckSeverity.WARN,
            f"silver no longer is its spec applied to {target.source}: {status.problem}",
        ),
        WindowState.LOST: (dg.AssetCheckSeverity.ERROR, f"replay window lost: {status.problem}"),
        WindowState.BLOCKED: (
            dg.AssetCheckSeverity.ERROR,
            f"runs fail until the input is fixed: {status.problem}",
        ),
        WindowState.SOURCE_MISSING: (
            dg.AssetCheckSeverity.WARN,
            f"{target.source} is missing: {status.problem}",
        ),
        WindowState.LOW_HEADROOM: (
            dg.AssetCheckSeverity.WARN,
            f"{headroom or 0:.2f} h until {target.source} version {(status.watermark or 0) + 1} "
            f"leaves the replay window (minimum {target.min_headroom_hours:g} h): run "
            f"{target.consumer}, or raise delta.deletedFileRetentionDuration on {target.source}",
        ),
    }
    unmeetable = _unmeetable_limit(target, status)
    if status.state in failed:
        severity, description = failed[status.state]
        return _result(
            REPLAY_WINDOW,
            target,
            passed=False,
            severity=severity,
            description=description + unmeetable,
            metadata=metadata,
        )
    description = f"replayable from version {status.earliest_replayable_version}"
    if not target.replays:
        description = (
            f"a snapshot source: each run reconciles {target.source}'s latest version, no "
            "history to replay"
        )
    if status.spec_state is SpecState.FORWARD_ONLY:
        description += (
            f"; spec edits of {', '.join(status.spec_changed_fields)} taken forward only: rows "
            "written before keep the previous spec's values until the next rebuild"
        )
    return _result(
        REPLAY_WINDOW, target, passed=True, description=description + unmeetable, metadata=metadata
    )


def _unmeetable_limit(target: CheckTarget, status: PipelineStatus) -> str:
    """A word on a headroom limit no headroom can reach: `min_headroom_hours` at or above the
    retention horizon (the most headroom a version ever has); "" otherwise."""
    horizon = status.retention_horizon_hours
    if not target.replays or horizon is None or target.min_headroom_hours < horizon:
        return ""
    return (
        f"; the limit min_headroom_hours {target.min_headroom_hours:g} h can never be met: "
        f"{target.source} keeps changes for {horizon:.2f} h (delta.deletedFileRetentionDuration, "
        "delta.logRetentionDuration), so every backlog warns: lower the limit below that, or "
        f"raise {target.source}'s retention"
    )


def foreign_writes_result(
    target: PipelineSpec | CheckTarget, status: PipelineStatus
) -> dg.AssetCheckResult:
    """The check result for silver's foreign writes in `status`: their count plotted, the
    versions and operations and the baseline as text; WARN (ERROR under FAIL_FAST) when any."""
    target = _target(target)
    writes = status.foreign_writes
    metadata: dict[str, dg.MetadataValue] = {
        "foreign_write_count": count(len(writes)),
        "foreign_writes": text(status.foreign_writes_summary),
        "baseline": text(status.foreign_writes_baseline),
        "note": text(status.foreign_writes_note),
    }
    since = f"since {status.foreign_writes_baseline or 'silver was created'}"
    if not writes:
        description = f"no write the platform did not make {since}"
        if status.foreign_writes_note:
            description += f"; {status.foreign_writes_note}"
        return _result(
            FOREIGN_WRITES, target, passed=True, description=description, metadata=metadata
        )
    return _result(
        FOREIGN_WRITES,
        target,
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR if target.fail_fast else dg.AssetCheckSeverity.WARN,
        description=(
            f"{len(writes)} write(s) to {target.consumer} the platform did not make {since}: "
            f"{status.foreign_writes_summary}. {target.consumer} may differ from its spec applied "
            f"to {target.source}: `cdf-platform verify` names the keys (`--repair` reconciles "
            "them), or a rebuild reconciles it all"
        ),
        metadata=metadata,
    )


def spec_metadata(status: PipelineStatus) -> dict[str, dg.MetadataValue]:
    """Whether silver follows its spec (`SpecState`), the fields that differ, and the current
    spec's fingerprint (silver's code version); nothing for a consumer asset."""
    if status.spec_state is None:
        return {}
    return {
        "spec_state": text(status.spec_state.value),
        "spec_changed_fields": text(", ".join(status.spec_changed_fields) or None),
        "spec_fingerprint": text(status.spec_fingerprint),
    }


def _control_reads(context: dg.AssetCheckExecutionContext, lake: LakeLayout) -> ControlReads:
    """The control rows this check evaluates with: a checks run's, read at its first check and
    kept by its `lake` resource (a checks run writes no control row, and each read returns
    every pipeline's row: per pipeline, a checks run over a fleet would grow with the square of
    its size); a silver run's, read now (its steps write them between its checks)."""
    run = context.op_execution_context.run
    if run.tags.get(QUEUE_TAG) != CHECKS_QUEUE:
        return ControlReads.of(lake.control())
    return lake.run_control_reads()


def pipeline_checks(spec: PipelineSpec) -> dg.AssetChecksDefinition:
    """`consumer_lag`, the blocking `replay_window` and `foreign_writes` on `spec`'s silver
    asset, computed from one status evaluation."""
    key = silver_key(spec.id)

    @dg.multi_asset_check(
        name=f"{key.to_python_identifier()}_checks",
        specs=[
            dg.AssetCheckSpec(
                CONSUMER_LAG,
                asset=key,
                description=(
                    "How far silver is behind bronze, counted from the first unapplied bronze "
                    f"commit: fails above {spec.max_allowed_lag_hours:g} hours "
                    "(`max_allowed_lag_hours`). Plots lag in versions (all, and those with "
                    "data) and in hours, and the watermark."
                ),
            ),
            dg.AssetCheckSpec(
                REPLAY_WINDOW,
                asset=key,
                blocking=True,
                description=(
                    "Whether the bronze versions silver has not applied can still be read from "
                    f"the change feed: warns below {spec.min_headroom_hours:g} hours of headroom "
                    "(`min_headroom_hours`), errors (and blocks downstream assets) once the "
                    "window is lost. Plots headroom in hours, the watermark and the earliest "
                    "replayable version: the window is lost once that passes watermark + 1."
                ),
            ),
            dg.AssetCheckSpec(
                FOREIGN_WRITES,
                asset=key,
                description=(
                    "Whether silver's log holds commits that change data and that the platform "
                    "did not make (an UPDATE, DELETE or INSERT by hand or by another job), since "
                    "the last verified version or rebuild: warns (errors under FAIL_FAST) and "
                    "lists their versions and operations; read without Spark. Plots their count."
                ),
            ),
        ],
        # Only the selected checks are computed and reported (a run may select one of them).
        can_subset=True,
    )
    def _checks(
        context: dg.AssetCheckExecutionContext, lake: LakeLayout
    ) -> Iterator[dg.AssetCheckResult]:
        status = pipeline_status(spec, lake.control(), reads=_control_reads(context, lake))
        selected = {check.name for check in context.selected_asset_check_keys}
        if CONSUMER_LAG in selected:
            yield consumer_lag_result(spec, status)
        if REPLAY_WINDOW in selected:
            yield replay_window_result(spec, status)
        if FOREIGN_WRITES in selected:
            yield foreign_writes_result(spec, status)

    return _checks


def silver_checks(specs: list[PipelineSpec]) -> list[dg.AssetChecksDefinition]:
    """The checks of every pipeline's silver asset: lag and window, and one per expectation
    (`cdf_platform.orchestration.checks.expectation_checks`)."""
    rules = (expectation_checks(spec) for spec in specs)
    return [*(pipeline_checks(spec) for spec in specs), *(c for c in rules if c is not None)]
