"""Consumer-aware VACUUM of a bronze table (docs/design.md section 9).

In delta-spark 4.x `VACUUM ... RETAIN n HOURS` ignores n unless n = 0: the table property
`delta.deletedFileRetentionDuration` is what decides which files survive. So before vacuuming,
the retention the registered consumers need (now - timestamp(min watermark + 1) + buffer) is
compared with that property; it is raised to cover them (up to a cap), or the VACUUM is refused.
`RETAIN 0 HOURS` runs only when no consumer would lose its window, or with an explicit override.

The decision is made from the logs alone (`plan_vacuum`, no JVM);
`cdf_platform.spark.table.vacuum_execution.execute_vacuum` carries it out.

Example:
    >>> decision = plan_vacuum("/lake/bronze/orders", specs, policy=RetentionPolicy.RAISE)
    ... # doctest: +SKIP
    >>> decision.action  # doctest: +SKIP
    <VacuumAction.RAISE_RETENTION_AND_VACUUM: 'RAISE_RETENTION_AND_VACUUM'>
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.storage import ENVIRONMENT_ONLY
from cdf_platform.state.catalog_names import locate_table, located_specs
from cdf_platform.state.consumer_marks import MarksLost, read_consumer_marks
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import read_silver_state
from cdf_platform.window.replay_window import (
    ReplayWindow,
    assess_consumer,
    compute_replay_window,
)

logger = logging.getLogger(__name__)

DELETED_FILE_RETENTION = "delta.deletedFileRetentionDuration"
LOG_RETENTION = "delta.logRetentionDuration"
_HOUR = 3600.0

# The maintenance run config field that vacuums even when a consumer loses its window.
OVERRIDE = "allow_window_loss: true"


class RetentionPolicy(StrEnum):
    """What to do when the consumers need more retention than the table has."""

    RAISE = "raise"
    """Raise `delta.deletedFileRetentionDuration` to cover them (up to the cap), then vacuum."""
    REFUSE = "refuse"
    """Do not vacuum; report what the consumers need."""


class VacuumAction(StrEnum):
    """The maintenance decision."""

    VACUUM = "VACUUM"
    RAISE_RETENTION_AND_VACUUM = "RAISE_RETENTION_AND_VACUUM"
    VACUUM_RETAIN_ZERO = "VACUUM_RETAIN_ZERO"
    REFUSE = "REFUSE"


@dataclass(frozen=True)
class ConsumerNeed:
    """What one consumer needs kept: everything from its first unprocessed version on.

    Attributes:
        consumer: A pipeline's id, or a consumer asset's key (`gold/revenue`).
        kind: `pipeline` (a silver table's pipeline) or `asset` (a consumer asset of the
            watermark IO manager, registered in the control tables).
    """

    consumer: str
    kind: str
    watermark: int | None
    first_needed_version: int | None
    needed_hours: float
    lag_hours: float
    observed_max_downtime_hours: float


@dataclass(frozen=True)
class VacuumDecision:
    """The maintenance decision for one bronze table, with the figures behind it."""

    table: str
    action: VacuumAction
    reason: str
    latest_version: int
    deleted_file_retention_hours: float
    log_retention_hours: float
    required_retention_hours: float
    new_deleted_file_retention_hours: float | None
    new_log_retention_hours: float | None
    max_retention_hours: float
    buffer_hours: float
    max_expected_downtime_hours: float
    recovery_buffer_hours: float
    consumers: list[ConsumerNeed] = field(default_factory=list)

    @property
    def recommended_retention_hours(self) -> float:
        """The sizing: max_expected_downtime_hours + recovery_buffer_hours."""
        return self.max_expected_downtime_hours + self.recovery_buffer_hours

    @property
    def will_vacuum(self) -> bool:
        """Whether `execute_vacuum` deletes anything."""
        return self.action is not VacuumAction.REFUSE

    @property
    def windows_cut(self) -> list[str]:
        """The consumers whose replay window this VACUUM deletes: every consumer behind for
        `RETAIN 0 HOURS`, else those behind by more than the retention the VACUUM keeps (only
        the window-loss override vacuums so)."""
        if not self.will_vacuum:
            return []
        behind = [c for c in self.consumers if c.first_needed_version is not None]
        if self.action is VacuumAction.VACUUM_RETAIN_ZERO:
            return [c.consumer for c in behind]
        kept = self.new_deleted_file_retention_hours or self.deleted_file_retention_hours
        return [c.consumer for c in behind if c.lag_hours > kept]

    @property
    def destroyed(self) -> str | None:
        """What this VACUUM destroys beyond the retention its table keeps, in words (None:
        nothing a reader within the retention could need)."""
        cut = self.windows_cut
        lost = f"; consumers {cut} lose their replay window" if cut else ""
        if self.action is VacuumAction.VACUUM_RETAIN_ZERO:
            return (
                f"every file version {self.latest_version} does not reference (time travel and "
                f"change-feed replay before version {self.latest_version}){lost}"
            )
        return f"files a consumer still needs{lost}" if cut else None

    def as_metadata(self) -> dict[str, Any]:
        """Flat figures for logs and Dagster metadata."""
        data = asdict(self)
        data["action"] = self.action.value
        data["recommended_retention_hours"] = self.recommended_retention_hours
        data["consumers"] = [asdict(c) for c in self.consumers]
        return data


def _observed_downtime_hours(
    control: ControlTable | None, pipeline_id: str, now: datetime
) -> float:
    """Longest gap between consecutive successful runs of a pipeline, the open gap included."""
    if control is None:
        return 0.0
    finished = sorted(
        _as_utc(r["finished_at"])
        for r in control.read_log(pipeline_id)
        if r.get("outcome") in ("SUCCESS", "REPAIRED") and r.get("finished_at") is not None
    )
    if not finished:
        return 0.0
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(finished)]
    gaps.append((now - finished[-1]).total_seconds())
    return max(0.0, max(gaps)) / _HOUR


def _asset_needs(
    table: str,
    window: ReplayWindow,
    control: ControlTable | None,
    buffer_hours: float,
    now: datetime,
) -> list[ConsumerNeed]:
    """What the consumer assets registered as reading `table` need kept: from their watermark
    on, unless they will read it in full anyway (never read it, recreated, marks lost)."""
    if control is None:
        return []
    needs = []
    for row in control.read_consumers(table):
        consumer, input_id = str(row["consumer"]), str(row["input_id"])
        try:
            marks = read_consumer_marks(
                str(row["consumer_table"]), consumer, storage=control.storage
            )
        except MarksLost:
            marks = None
        mark = marks.inputs.get(input_id) if marks is not None else None
        if mark is not None and mark.table_id not in (None, window.table_id):
            mark = None  # it read a table since recreated: its next read is full
        watermark = mark.version if mark is not None else None
        assessment = assess_consumer(window, watermark, now=now)
        behind = watermark is not None and assessment.first_unprocessed_version is not None
        needs.append(
            ConsumerNeed(
                consumer=consumer,
                kind="asset",
                watermark=watermark,
                first_needed_version=assessment.first_unprocessed_version if behind else None,
                needed_hours=assessment.lag_hours + buffer_hours if behind else 0.0,
                lag_hours=assessment.lag_hours if watermark is not None else 0.0,
                observed_max_downtime_hours=0.0,
            )
        )
    return needs


def _as_utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _hours(delta: timedelta) -> float:
    return delta.total_seconds() / _HOUR


def plan_vacuum(
    table: str,
    specs: list[PipelineSpec],
    *,
    policy: RetentionPolicy = RetentionPolicy.RAISE,
    buffer_hours: float = 24.0,
    max_retention_hours: float = 30 * 24.0,
    recovery_buffer_hours: float = 24.0,
    log_retention_margin_hours: float = 24.0,
    retain_zero: bool = False,
    allow_window_loss: bool = False,
    control: ControlTable | None = None,
    now: datetime | None = None,
) -> VacuumDecision:
    """Decide how to vacuum `table` without cutting the replay window of its consumers.

    Args:
        table: The table's location (bronze, or a silver table consumer assets read), or its
            catalog name (located through `control`).
        specs: All pipelines; those whose `source` is `table` are its consumers (catalog
            names located through `control`). The consumer assets `control` has registered
            as reading `table` are its consumers too.
        policy: Raise the retention property (up to `max_retention_hours`) or refuse.
        buffer_hours: Extra hours kept beyond what each consumer needs right now.
        max_retention_hours: Cap on `delta.deletedFileRetentionDuration` when raising it.
        recovery_buffer_hours: Added to the observed downtime for the sizing report.
        log_retention_margin_hours: `logRetentionDuration` is kept at least this much above
            `deletedFileRetentionDuration`.
        retain_zero: Vacuum with `RETAIN 0 HOURS` (delete every unreferenced file now).
        allow_window_loss: Explicit override: vacuum even if a consumer loses its window.
        control: Control tables: the pipelines' observed downtime and the registered
            consumer assets (without it, only the pipelines are counted).
        now: The clock (default: now, UTC).

    Raises:
        TableNameNotLocated: `table` is a catalog name no run has located yet.
    """
    now = now or datetime.now(UTC)
    table = locate_table(table, control)
    specs = located_specs(specs, control)
    storage = control.storage if control is not None else ENVIRONMENT_ONLY
    window = compute_replay_window(table, now=now, storage=storage)
    current = _hours(window.deleted_file_retention)
    log_hours = _hours(window.log_retention)
    consumers = _pipeline_needs(table, specs, window, control, buffer_hours, now)
    consumers.extend(_asset_needs(table, window, control, buffer_hours, now))
    required = max([buffer_hours, *(c.needed_hours for c in consumers)])
    choice = _choose(
        required,
        current,
        lagging=[c.consumer for c in consumers if c.first_needed_version is not None],
        policy=policy,
        max_retention_hours=max_retention_hours,
        retain_zero=retain_zero,
        allow_window_loss=allow_window_loss,
    )
    effective = choice.new_retention if choice.new_retention is not None else current
    new_log = None
    if (
        choice.action is not VacuumAction.REFUSE
        and log_hours < effective + log_retention_margin_hours
    ):
        new_log = effective + log_retention_margin_hours
    return VacuumDecision(
        table=table,
        action=choice.action,
        reason=choice.reason,
        latest_version=window.latest_version,
        deleted_file_retention_hours=current,
        log_retention_hours=log_hours,
        required_retention_hours=required,
        new_deleted_file_retention_hours=choice.new_retention,
        new_log_retention_hours=new_log,
        max_retention_hours=max_retention_hours,
        buffer_hours=buffer_hours,
        max_expected_downtime_hours=max([0.0, *(c.observed_max_downtime_hours for c in consumers)]),
        recovery_buffer_hours=recovery_buffer_hours,
        consumers=consumers,
    )


def _pipeline_needs(
    table: str,
    specs: list[PipelineSpec],
    window: ReplayWindow,
    control: ControlTable | None,
    buffer_hours: float,
    now: datetime,
) -> list[ConsumerNeed]:
    """What the pipelines reading `table` (those of `specs` whose source it is) need kept: from
    their watermark on, with `buffer_hours` beyond their lag."""
    needs = []
    for spec in specs:
        if spec.source.rstrip("/") != table.rstrip("/"):
            continue
        storage = control.storage if control is not None else ENVIRONMENT_ONLY
        watermark = read_silver_state(spec.target, spec.id, storage=storage).watermark
        assessment = assess_consumer(window, watermark, now=now)
        # A consumer that has not started loads a snapshot, and one that is caught up needs only
        # the buffer for its next commit: neither needs history kept. Nor does a snapshot
        # source's pipeline, which reads bronze's latest version only.
        replays = watermark is not None and spec.changes.replays_history
        needed = assessment.lag_hours + buffer_hours if assessment.first_unprocessed_version else 0
        needs.append(
            ConsumerNeed(
                consumer=spec.id,
                kind="pipeline",
                watermark=watermark,
                first_needed_version=assessment.first_unprocessed_version if replays else None,
                needed_hours=needed if replays else 0.0,
                lag_hours=assessment.lag_hours if watermark is not None else 0.0,
                observed_max_downtime_hours=_observed_downtime_hours(control, spec.id, now),
            )
        )
    return needs


@dataclass(frozen=True)
class _Choice:
    """What a maintenance run does, why, and the retention it sets first (if it raises it)."""

    action: VacuumAction
    reason: str
    new_retention: float | None = None


def _choose(
    required: float,
    current: float,
    *,
    lagging: list[str],
    policy: RetentionPolicy,
    max_retention_hours: float,
    retain_zero: bool,
    allow_window_loss: bool,
) -> _Choice:
    """The action for a table whose consumers need `required` hours kept where it keeps
    `current` (`lagging`: the consumers behind); the other arguments: see `plan_vacuum`."""
    if retain_zero:
        if lagging and not allow_window_loss:
            return _Choice(
                VacuumAction.REFUSE,
                f"RETAIN 0 HOURS would delete files that consumers {lagging} still need to "
                f"replay; catch them up first, or set {OVERRIDE} to cut their windows knowingly",
            )
        return _Choice(
            VacuumAction.VACUUM_RETAIN_ZERO,
            "RETAIN 0 HOURS: no consumer is behind"
            if not lagging
            else f"RETAIN 0 HOURS with the override: consumers {lagging} lose their window",
        )
    if required <= current:
        return _Choice(
            VacuumAction.VACUUM,
            f"the retention of {current:g} h covers every consumer (needs {required:.2f} h)",
        )
    if policy is RetentionPolicy.RAISE and required <= max_retention_hours:
        new_retention = float(math.ceil(required))
        return _Choice(
            VacuumAction.RAISE_RETENTION_AND_VACUUM,
            f"consumers need {required:.2f} h but the table keeps {current:g} h: raising "
            f"{DELETED_FILE_RETENTION} to {new_retention:g} h before vacuuming",
            new_retention,
        )
    if allow_window_loss:
        return _Choice(
            VacuumAction.VACUUM,
            f"consumers need {required:.2f} h, more than {current:g} h kept; vacuuming anyway "
            "with the explicit window-loss override",
        )
    why = (
        f"above the cap of {max_retention_hours:g} h"
        if policy is RetentionPolicy.RAISE
        else "and the policy is to refuse"
    )
    return _Choice(
        VacuumAction.REFUSE,
        f"consumers need {required:.2f} h of history but the table keeps {current:g} h, {why}: "
        "vacuuming now would cut their replay window; catch them up, raise "
        f"max_retention_hours (policy raise), or set {OVERRIDE} to cut them knowingly",
    )
