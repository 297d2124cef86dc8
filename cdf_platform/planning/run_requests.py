"""The incremental sensor's run decisions, from plain values (no Dagster, no JVM): what each
pipeline wants in a tick (`wanted_run`: an incremental run, a repair, a spec edit's run, a
location to find, or nothing, and why it is held back), when a caught-up silver is due for a
refresh (`refresh_due`), which silver runs count as pending (`pending_runs`, and the windows a
failed run counts as pending in: `RETRY_WAIT`, `DECISION_WAIT`), which wanted runs are left out
and why, which ones share a run and how they spread over the instance's silver slots, and the
run keys that make Dagster drop a request made twice (`run_requests`), how many silver runs
the instance runs at once (`run_slots`) and whether its silver queue is full (`queue_full`).

`cdf_platform.orchestration.sensors.incremental_sensor` reads Dagster's runs, reduces each to a
`SilverRun`, asks these functions and turns their answers (`PlannedRun`) into run requests.

Example:
    >>> spec = PipelineSpec(id="o", source="b", target="s", keys=["k"])
    >>> (run,), left_out = run_requests([WantedRun(spec, "incremental", "7")], {},
    ...     max_pipelines_per_run=10)
    >>> run.run_key, run.requested, left_out
    ('incremental:o:7', 'o=incremental:7', [])
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, Protocol

from cdf_platform.core.errors import CdfPlatformError, TableNameNotLocated
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.assessment import ControlReads
from cdf_platform.planning.plan import plan_from
from cdf_platform.planning.repair import repair_decision
from cdf_platform.planning.status import PipelineStatus, WindowState, status_and_assessment
from cdf_platform.state.control import ControlTable


class Log(Protocol):
    """Where the decisions say what they saw: a `logging.Logger`, or a sensor's log."""

    def info(self, msg: str, *args: object) -> None:
        """A decision taken."""

    def warning(self, msg: str, *args: object) -> None:
        """A pipeline the tick cannot read, or a window lost."""


# How long a failed run marked for Dagster's run retries counts as pending while its retry is
# not created yet (the retry daemon runs beside the sensors, within seconds).
RETRY_WAIT = timedelta(hours=1)
# A run's failure and Dagster's decision whether to retry it are two writes: a failed run
# without the decision, when the instance retries runs, counts as pending this long (the
# decision follows within milliseconds; the retry daemon writes it for a run whose writer died
# between the two).
DECISION_WAIT = timedelta(minutes=1)
# Dagster's failure reasons of a run that failed in its own code: a rerun at the same bronze
# version would fail the same way. Any other failure (the process killed or lost, a start
# timeout) is a run that died.
FAILED_IN_ITS_CODE = frozenset({"STEP_FAILURE", "JOB_INITIALIZATION_FAILURE"})
_NOT_OURS = (WindowState.SOURCE_MISSING, WindowState.BLOCKED)
_MAY_SHARE = (WindowState.OK, WindowState.LOW_HEADROOM, WindowState.NOT_STARTED)


class RunFate(StrEnum):
    """How a silver run ended, as the decisions tell runs apart."""

    FAILED_IN_ITS_CODE = "failed_in_its_code"
    """Its step failed on a classified error: asked the same thing again, it fails the same
    way."""
    DIED = "died"
    """Canceled, or failed otherwise (its process killed or lost, or its step failed on a
    retryable class once its retries were spent): asked again, it may succeed."""
    OTHER = "other"
    """Succeeded, or not ended."""


def run_fate(
    *, failed: bool, canceled: bool, failure_reason: str | None, marked_retryable: bool
) -> RunFate:
    """How a run ended: `failed` or `canceled`, Dagster's `failure_reason`, and whether its
    step marked it for run retries (a failure that running it again may not meet: the engine
    restarted, a store briefly away)."""
    if failed and failure_reason in FAILED_IN_ITS_CODE and not marked_retryable:
        return RunFate.FAILED_IN_ITS_CODE
    return RunFate.DIED if failed or canceled else RunFate.OTHER


@dataclass(frozen=True)
class SilverRun:
    """A silver run as the decisions see it.

    Attributes:
        run_id: Its id.
        covers: The pipelines (of those asked about) whose silver it writes.
        fate: How it ended.
        requested: Pipeline id -> what the sensor asked of it in this run (`WantedRun.requested`).
        retried: Dagster's run retries created its retry (then the retry is the pending run).
    """

    run_id: str
    covers: frozenset[str]
    fate: RunFate = RunFate.OTHER
    requested: Mapping[str, str] = field(default_factory=dict)
    retried: bool = False


def pending_runs(runs: Iterable[SilverRun]) -> dict[str, str]:
    """Pipeline id -> the id of the first of `runs` (pending ones, then their retries, then
    failed ones still counted as pending) that covers it and was not retried: each such
    pipeline has its run pending, and no other is requested for it."""
    pending: dict[str, str] = {}
    for run in runs:
        if run.retried:
            continue  # retried: the retry is the pending run, if any
        for pipeline_id in run.covers:
            pending.setdefault(pipeline_id, run.run_id)
    return pending


def requested_text(asked: Iterable[tuple[str, str]]) -> str:
    """`a=incremental:4,b=refresh:3:17`: what a run asks of each of its pipelines."""
    return ",".join(f"{pipeline_id}={requested}" for pipeline_id, requested in asked)


def parse_requested(text: str) -> dict[str, str]:
    """Pipeline id -> what a run asked of it, from `requested_text`'s form."""
    pairs = (item.split("=", 1) for item in text.split(",") if "=" in item)
    return {pipeline_id: requested for pipeline_id, requested in pairs}


@dataclass(frozen=True)
class WantedRun:
    """A run the tick wants for a pipeline: why, the run key's subject, and whether it may share
    a run with other pipelines (`RunPlan.shares_a_run`, or a refresh: no large read)."""

    spec: PipelineSpec
    reason: str
    key: str
    shares: bool = False

    @property
    def requested(self) -> str:
        """What the tick asks of the pipeline, as the run key and the requested tag name it."""
        return f"{self.reason}:{self.key}"


@dataclass(frozen=True)
class CaughtUp:
    """The pipeline has applied bronze's latest version (`watermark`): a refresh may be due."""

    watermark: int


@dataclass(frozen=True)
class HeldBack:
    """The pipeline is behind or broken and gets no run, for `why`."""

    why: str


def assess(
    spec: PipelineSpec, control: ControlTable, reads: ControlReads | None = None
) -> tuple[PipelineStatus, bool]:
    """`spec`'s status and whether a run of it now may share a run with other pipelines'
    (`RunPlan.shares_a_run`: a small incremental run or initial load, nothing to fall back on),
    from one assessment (JVM-free); `reads` are `control`'s rows when the tick has read them."""
    # Foreign writes change no run: the sensor does not search silver's log for them.
    status, found = status_and_assessment(spec, control, reads=reads, foreign_writes=False)
    if found is None or status.state not in _MAY_SHARE:
        return status, False
    try:
        return status, plan_from(found).shares_a_run()
    except CdfPlatformError:
        return status, False


def wanted_run(
    spec: PipelineSpec, control: ControlTable, reads: ControlReads, log: Log
) -> WantedRun | CaughtUp | HeldBack | None:
    """The run `spec` wants in this tick; `CaughtUp` when it is caught up; `HeldBack` (why)
    when it gets none; None when its bronze has no version yet."""
    try:
        status, small = assess(spec, control, reads)
    except (CdfPlatformError, NotImplementedError) as err:
        # One unreadable pipeline (e.g. a remote table the JVM-free log reader does not
        # read yet) must not stop the others from being triggered.
        log.warning("%s: cannot read its status: %s", spec.id, err)
        return HeldBack(getattr(err, "incident_code", type(err).__name__))
    if status.problem_code == TableNameNotLocated.incident_code:
        # Only a run can ask Spark's catalog where a named table lives: one run locates
        # it, and from then on the sensor reads its log like any other.
        return WantedRun(spec, "locate", "first")
    if status.state in _NOT_OURS:
        return HeldBack(status.state.value)
    latest, watermark = status.latest_version, status.watermark
    if latest is None:
        return None
    if status.state is WindowState.LOST:
        decision = repair_decision(spec.fallback_mode)
        if not decision.automatic:
            return HeldBack(f"LOST, {decision.why_not}")
        # Seen in this tick: the run's plan meets the loss and rebuilds (its fallback),
        # once per loss; the checks still record it.
        log.warning("%s: replay window lost (%s)", spec.id, status.problem_code)
        return WantedRun(spec, "repair", f"{watermark}:{latest}")
    if status.state is WindowState.SPEC_CHANGED:
        # The edited spec's run reconciles silver (or, FAIL_FAST, refuses and says so):
        # one request per spec fingerprint, whether bronze moved or not.
        log.info("%s: spec edited (%s)", spec.id, status.problem)
        return WantedRun(spec, "spec", str(status.spec_fingerprint))
    if watermark is None or latest > watermark:
        log.info("%s: bronze at version %d, watermark %s", spec.id, latest, watermark)
        return WantedRun(spec, "incremental", str(latest), shares=small)
    return CaughtUp(watermark)


def freshness_window(spec: PipelineSpec) -> timedelta:
    """`max_allowed_lag_hours` as the silver asset's freshness window (Dagster's floor: one
    minute)."""
    return max(timedelta(hours=spec.max_allowed_lag_hours), timedelta(minutes=1))


def refresh_due(spec: PipelineSpec, last_materialized: float | None, now: float) -> int | None:
    """The refresh period number when a caught-up silver asset is due for a refresh (its last
    materialization is half its freshness window old, or it has none), else None."""
    half = freshness_window(spec).total_seconds() / 2
    if last_materialized is not None and now - last_materialized < half:
        return None
    return int(now // half)


@dataclass(frozen=True)
class PlannedRun:
    """One run a tick requests.

    Attributes:
        run_key: Its run key (Dagster drops a request whose key was used).
        pipeline_ids: Its pipelines, each its own step.
        requested: What it asks of each (`requested_text`).
        pipeline_id: Its pipeline when it has one alone.
        first_in_queue: It goes first in the run queue (a lost window's repair).
    """

    run_key: str
    pipeline_ids: tuple[str, ...]
    requested: str
    pipeline_id: str | None = None
    first_in_queue: bool = False


def run_requests(
    wanted: list[WantedRun],
    newest: Mapping[str, SilverRun],
    *,
    max_pipelines_per_run: int,
    queue_full: bool = False,
) -> tuple[list[PlannedRun], list[tuple[str, str]]]:
    """The runs for `wanted` and the pipelines left out (each id with why); `newest`: each
    pipeline's newest silver run.

    A pipeline whose newest run failed in its own code when asked the same thing is left out
    (it would fail the same way; the next bronze version, or a person, brings the next run). A
    pipeline whose newest run died is asked again, its run key naming the dead run (Dagster
    drops a request whose run key was used). Pipelines that may share a run go in as few runs
    of at most `max_pipelines_per_run` as hold them, spread evenly (one process for each run,
    each pipeline its own step, watermark and failure), unless the silver queue is full
    (`queue_full`: every slot busy and a run waiting already): then they are left out until it
    moves, and the tick after gathers them in fewer, larger runs. The others get a run each,
    whatever the queue."""
    planned: list[PlannedRun] = []
    left_out: list[tuple[str, str]] = []
    shared: list[tuple[WantedRun, str]] = []
    for item in wanted:
        last = newest.get(item.spec.id)
        if (
            last is not None
            and last.fate is RunFate.FAILED_IN_ITS_CODE
            and last.requested.get(item.spec.id) == item.requested
        ):
            left_out.append((item.spec.id, f"run {last.run_id[:8]} failed at {item.key}"))
            continue
        died = last is not None and last.fate is RunFate.DIED
        after = f":after:{last.run_id[:8]}" if last is not None and died else ""
        if item.shares:
            shared.append((item, after))
        else:
            planned.append(_planned([(item, after)]))
    if shared and queue_full:
        # A run queued behind busy slots would only lengthen the queue: each run pays its
        # launch and its events, and a queue of small runs drains slower than the commits come.
        why = "every silver slot is busy and a run is queued; it goes with the next run"
        left_out.extend((item.spec.id, why) for item, _ in shared)
        return planned, left_out
    # As few runs as the limit allows, the pipelines spread evenly over them: runs that finish
    # together (a fleet is caught up when its slowest run ends), none a short remainder that
    # pays a run's start for a few pipelines.
    runs = -(-len(shared) // max_pipelines_per_run)
    start = 0
    for index in range(runs):
        size = len(shared) // runs + (1 if index < len(shared) % runs else 0)
        planned.append(_planned(shared[start : start + size]))
        start += size
    return planned, left_out


def _planned(items: list[tuple[WantedRun, str]]) -> PlannedRun:
    """One run for the pipelines of `items` (each with its dead-run suffix)."""
    requested = requested_text((item.spec.id, item.requested) for item, _ in items)
    ids = tuple(item.spec.id for item, _ in items)
    if len(items) == 1:
        ((item, after),) = items
        run_key = f"{item.reason}:{item.spec.id}:{item.key}{after}"
        # A lost window goes first in the queue.
        return PlannedRun(run_key, ids, requested, item.spec.id, item.reason == "repair")
    named = ",".join(f"{item.spec.id}={item.requested}{after}" for item, after in items)
    run_key = f"batch:{hashlib.sha256(named.encode()).hexdigest()[:20]}"
    return PlannedRun(run_key, ids, requested)


def queue_full(slots: int | None, in_flight: int) -> bool:
    """Whether a run queue of `slots` silver slots (None: no limit) is full: its silver runs
    `in_flight` (queued, starting or running) are more than its slots, so one waits behind
    busy slots already.

    Example:
        >>> queue_full(4, 3), queue_full(4, 4), queue_full(4, 5), queue_full(None, 9)
        (False, False, True, False)
    """
    return slots is not None and in_flight > slots


def run_slots(
    all_runs: int, rules: Iterable[Mapping[str, Any]], *, tag: str, value: str
) -> int | None:
    """How many runs tagged `tag: value` a run queue runs at once: the lowest of its limit on
    all runs (`all_runs`; negative: none) and its tag rules' limits that apply (a rule on that
    tag and value, on the tag whatever its value, or per unique value); None when none
    applies."""
    limits = [all_runs] if all_runs >= 0 else []
    for rule in rules:
        ruled = rule.get("value")
        # No value: one limit over every value; a dict (applyLimitPerUniqueValue): per value.
        if rule.get("key") == tag and (ruled in (None, value) or isinstance(ruled, dict)):
            limits.append(int(rule["limit"]))
    return min(limits) if limits else None
