"""The one decision on a lost replay window, and on every other problem a snapshot rebuild
repairs: whether the platform repairs it now, without a person, or leaves it to one.

Every caller asks here: the run of the problem its plan or its read meets
(`cdf_platform.run`), the incremental and rebuild sensors of a LOST window they see, and a
silver run requested for a loss whether that loss is repaired already (`already_repaired`).

Example:
    >>> repair_decision(FallbackMode.SNAPSHOT_REBUILD).automatic
    True
    >>> repair_decision(FallbackMode.FAIL_FAST).why_not
    'FAIL_FAST: left for a person'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.core.errors import REBUILDABLE, CdfPlatformError, SpecChanged
from cdf_platform.core.spec.modes import FallbackMode

if TYPE_CHECKING:
    from cdf_platform.planning.plan import RunPlan


@dataclass(frozen=True)
class RepairDecision:
    """Whether a problem is repaired by a snapshot rebuild now, and if not, why.

    Attributes:
        automatic: A rebuild runs without a person (the run rebuilds; a sensor requests it).
        why_not: When not automatic, the reason in a few words (for logs and skip reasons).
    """

    automatic: bool
    why_not: str | None = None


def repair_decision(
    fallback_mode: FallbackMode,
    problem: CdfPlatformError | None = None,
    *,
    change_feed_on: bool = True,
) -> RepairDecision:
    """The decision on `problem` (None: a LOST window a sensor sees, whose run's plan names the
    problem) of a pipeline with `fallback_mode`.

    A spec edit is always repaired by a rebuild (it reads no change feed); a lost window,
    source reset, incompatible schema change or change-feed gap when bronze's change feed is
    on again (`change_feed_on`; a snapshot source needs none). Any other problem, and any
    problem of a FAIL_FAST pipeline, is left to a person.
    """
    if problem is not None and not _rebuild_repairs(problem, change_feed_on=change_feed_on):
        return RepairDecision(False, f"{problem.incident_code}: a rebuild does not repair it")
    if fallback_mode is FallbackMode.FAIL_FAST:
        return RepairDecision(False, "FAIL_FAST: left for a person")
    return RepairDecision(True)


def _rebuild_repairs(problem: CdfPlatformError, *, change_feed_on: bool) -> bool:
    if isinstance(problem, SpecChanged):
        return True
    return isinstance(problem, REBUILDABLE) and change_feed_on


def already_repaired(plan: RunPlan, repair_of: int | None) -> bool:
    """Whether a rebuild requested for the loss at watermark `repair_of` finds it repaired:
    silver's watermark moved since, and the plan meets no problem."""
    return repair_of is not None and plan.watermark != repair_of and plan.problem is None
