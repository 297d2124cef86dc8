"""Why a tick of the incremental sensor requested nothing, in words true of each pipeline: a
run in progress (queued, running, or failed and about to be retried), held back and why (its
bronze is missing, a person must act, its run failed on the same request), or up to date.

Example:
    >>> reason = TickReason(pipelines=3)
    >>> reason.in_progress("orders", "1a2b3c4d")
    >>> reason.held_back("customers", "SOURCE_MISSING")
    >>> reason.up_to_date("accounts")
    >>> for part in reason.text().split("; "):
    ...     print(part)
    nothing to request: orders has a run in progress (1a2b3c4d)
    held back: customers (SOURCE_MISSING)
    accounts is up to date
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Up-to-date pipelines named in a reason; a fleet's others are counted.
NAMED_UP_TO_DATE = 10


@dataclass
class TickReason:
    """What one tick found for each of its `pipelines` pipelines, and its reason as text."""

    pipelines: int
    running: list[tuple[str, str]] = field(default_factory=list)
    held: list[tuple[str, str]] = field(default_factory=list)
    current: list[str] = field(default_factory=list)

    def in_progress(self, pipeline_id: str, run_id: str) -> None:
        """`pipeline_id` has a run pending: it applies every version up to bronze's latest."""
        self.running.append((pipeline_id, run_id[:8]))

    def held_back(self, pipeline_id: str, why: str) -> None:
        """`pipeline_id` is behind or broken and gets no run, for `why`."""
        self.held.append((pipeline_id, why))

    def up_to_date(self, pipeline_id: str) -> None:
        """`pipeline_id`'s silver has applied bronze's latest version."""
        self.current.append(pipeline_id)

    @property
    def held_ids(self) -> set[str]:
        return {pipeline_id for pipeline_id, _ in self.held}

    def text(self) -> str:
        """The skip reason: runs in progress, then those held back, then those up to date."""
        parts = []
        if len(self.running) == 1:
            ((pipeline_id, run_id),) = self.running
            parts.append(f"{pipeline_id} has a run in progress ({run_id})")
        elif self.running:
            runs = ", ".join(f"{pipeline_id} ({run_id})" for pipeline_id, run_id in self.running)
            parts.append(f"runs in progress: {runs}")
        if self.held:
            parts.append("held back: " + ", ".join(f"{p} ({why})" for p, why in self.held))
        current = [p for p in self.current if p not in self.held_ids]
        if current and len(current) == self.pipelines:
            parts.append("every silver table is up to date")
        elif current:
            named = ", ".join(current[:NAMED_UP_TO_DATE])
            if len(current) > NAMED_UP_TO_DATE:
                named += f" and {len(current) - NAMED_UP_TO_DATE} more"
            parts.append(f"{named} {'is' if len(current) == 1 else 'are'} up to date")
        return "nothing to request" + (": " + "; ".join(parts) if parts else "")
