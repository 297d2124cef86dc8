"""What a requested rebuild does, decided by `PipelineRunner` for every entry (the silver asset,
`cdf-platform rebuild`, a direct call): refused on a pipeline that leaves repairs to a person
(FAIL_FAST) unless the entry carries a person's decision, skipped when the loss it was asked to
repair is repaired already, and recorded as the audit record of an override when it overrides.

Who asks is a `RunEntry`: the facts its audit record names (run id, job, tags) and who, if
anyone, lets it rebuild a FAIL_FAST pipeline without the review that mode asks for:
- the silver asset (the rebuild job): its run config's `override_fail_fast`, which the
  deployment must permit (`CDF_ALLOW_DESTRUCTIVE=1`; the asset refuses it otherwise, before
  the run: `cdf_platform.orchestration.shared.destructive`);
- `cdf-platform rebuild` (`RunEntry.at_shell`): a person at a shell typed it, and needs no
  permission;
- a direct call of `PipelineRunner` (`IN_PROCESS`: a notebook, the tests, the benchmarks): its
  caller, as at a shell.
Refused, the run raises `RebuildNeedsOverride` before anything is read or written. Let run, the
override is one row of the maintenance log, the same whatever the entry (`override_record`:
`rebuild_overriding_fail_fast`, outcome `started`, destructive, `permitted_by` the entry's),
and a warning in the run's log.

Example:
    >>> RunEntry.at_shell("rebuild").override
    'cdf-platform at a shell'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import RebuildNeedsOverride
from cdf_platform.planning.repair import already_repaired, repair_decision

if TYPE_CHECKING:
    from cdf_platform.planning.plan import RunPlan
    from cdf_platform.state.control import ControlTable

OVERRIDE_ACTION = "rebuild_overriding_fail_fast"
"""The maintenance log's `action` of a rebuild overriding FAIL_FAST (and of its refusal by a
deployment that does not permit it)."""
AT_SHELL = "cdf-platform at a shell"
"""The `permitted_by` of a rebuild a person typed: the command needs no permission."""

Log = logging.Logger | logging.LoggerAdapter[logging.Logger]


@dataclass(frozen=True)
class RunEntry:
    """Who asks for a run (module doc).

    Attributes:
        job: The maintenance log's `job`: the orchestrator's job, or the command.
        run_id: The orchestrator's run id (None: the run's own, its load-log row's).
        tags: The orchestrator run's tags (who launched it: the UI's user tag, a sensor).
        override: Who lets a rebuild of a FAIL_FAST pipeline skip its review, the audit
            record's `permitted_by` (None: such a rebuild is refused).
    """

    job: str
    run_id: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    override: str | None = None

    @classmethod
    def at_shell(cls, command: str) -> RunEntry:
        """`cdf-platform <command>`: a person at a shell, who needs no permission."""
        return cls(job=f"cdf-platform {command}", override=AT_SHELL)


IN_PROCESS = RunEntry(job="PipelineRunner", override="a caller of PipelineRunner")
"""A direct call of `PipelineRunner` (a notebook, the tests, the benchmarks): its caller
decides, as a person at a shell does."""


@dataclass(frozen=True)
class RequestedRebuild:
    """What a requested rebuild does (`requested_rebuild`).

    Attributes:
        runs: Whether it runs (else the run does what its plan says).
        overridden_by: Who let it override FAIL_FAST (the audit record's `permitted_by`), if
            it does.
    """

    runs: bool
    overridden_by: str | None = None


NOT_REQUESTED = RequestedRebuild(runs=False)
"""No rebuild was asked for: the run does what its plan says."""


def requested_rebuild(
    entry: RunEntry,
    control: ControlTable,
    spec_target: str,
    plan: RunPlan,
    *,
    run_id: str,
    repair_of: int | None,
    log: Log,
) -> RequestedRebuild:
    """What a rebuild `entry` asks for does (module doc): refused when the pipeline leaves
    repairs to a person (`repair_decision`) and `entry` carries no person's decision; not run
    when it was asked to repair the loss at watermark `repair_of` (the rebuild sensor's
    request) and an earlier run repaired it (`already_repaired`); else run, its audit record
    written when it overrides FAIL_FAST. `spec_target`: silver as the pipeline names it;
    `run_id`: the run's own id.

    Raises:
        RebuildNeedsOverride: refused (nothing was read or written).
    """
    spec = plan.spec
    left_to_a_person = not repair_decision(spec.fallback_mode).automatic
    if left_to_a_person and entry.override is None:
        raise RebuildNeedsOverride(
            "the pipeline is FAIL_FAST: a rebuild needs a person's decision",
            pipeline_id=spec.id,
            table=spec_target,
        )
    if already_repaired(plan, repair_of):
        log.info(
            "%s: the loss at watermark %s was repaired already (watermark now %s): no "
            "rebuild, the run does what its plan says",
            spec.id,
            repair_of,
            plan.watermark,
        )
        return RequestedRebuild(runs=False)
    if not left_to_a_person:
        return RequestedRebuild(runs=True)
    record = override_record(entry, spec_target, plan, run_id=run_id)
    log.warning("%s (%s)", _reason(plan), plan.describe())
    control.append_maintenance(record)
    return RequestedRebuild(runs=True, overridden_by=entry.override)


def _reason(plan: RunPlan) -> str:
    return f"rebuild of FAIL_FAST pipeline {plan.spec.id} with override_fail_fast"


def override_record(
    entry: RunEntry, spec_target: str, plan: RunPlan, *, run_id: str
) -> dict[str, Any]:
    """The audit record of a rebuild overriding FAIL_FAST: its maintenance-log row (without
    `recorded_at`, which the control table adds). `run_id`: the run's own id, named when the
    entry has no orchestrator run of its own."""
    incident = plan.problem.incident_code if plan.problem else "none found by the plan"
    return {
        "run_id": entry.run_id or run_id,
        "job": entry.job,
        "tags": json.dumps(dict(entry.tags), sort_keys=True),
        "table_location": spec_target,
        "action": OVERRIDE_ACTION,
        "outcome": "started",
        "destructive": True,
        "permitted_by": entry.override,
        "reason": f"{_reason(plan)}; incident: {incident}",
        "destroyed": "silver's rows are replaced by bronze's snapshot at version "
        f"{plan.end_version} without the FAIL_FAST review",
        "latest_version": plan.end_version,
    }
