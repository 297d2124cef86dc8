"""Incidents: what was seen (`Signal`s, in the order it happened) folded into incidents that
open once and end once, and the messages (`Alert`s) they call for.

An incident is one event about one subject (a pipeline, or a consumer asset): `window_lost` of
`orders`. Seeing it again while it is open says nothing; seeing it end says so once. Opening a
lost window ends the subject's `window_at_risk` without a message of its own (the loss says
more). One-off events (a repair started, a destructive action) are one message each.

Example:
    >>> book = IncidentBook()
    >>> seen = Signal(AlertEvent.WINDOW_LOST, "orders", Change.OPEN, Severity.CRITICAL,
    ...               "window lost", at=1.0, source="7")
    >>> [alert.status for alert in book.fold(seen)], book.fold(seen)
    (['opened'], [])
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from cdf_platform.core.alert_config import AlertEvent, Severity

Figure = int | float | str | None


class Change(StrEnum):
    """What a signal says of its incident."""

    OPEN = "open"  # the incident holds (open it unless it is open)
    CLEAR = "clear"  # it no longer holds (end it if it is open)
    ONCE = "once"  # a one-off event: a message of its own


# What an incident's messages are called: (opened or event, resolved).
TITLES: dict[AlertEvent, tuple[str, str]] = {
    AlertEvent.WINDOW_AT_RISK: ("replay window at risk", "replay window no longer at risk"),
    AlertEvent.WINDOW_LOST: ("replay window lost", "replay window repaired"),
    AlertEvent.REPAIR_STARTED: ("repair started", ""),
    AlertEvent.DESTRUCTIVE_ACTION: ("destructive action", ""),
    AlertEvent.QUARANTINE: ("quarantine above its limit", "quarantine back within its limit"),
    AlertEvent.FOREIGN_WRITE: ("foreign write detected", "no foreign write any more"),
    AlertEvent.VERIFICATION_MISMATCH: (
        "verification mismatch",
        "verification equal again",
    ),
    AlertEvent.RUN_FAILED: ("run failed with no retry left", "runs succeed again"),
}


@dataclass(frozen=True)
class Signal:
    """One thing seen, about one subject.

    Attributes:
        event: What it is about.
        subject: The pipeline id (or a consumer asset's key).
        change: Whether the incident holds, no longer holds, or is a one-off event.
        severity: How urgent.
        summary: What happened, in a sentence.
        advice: What to do, if anything.
        figures: The numbers behind it (headroom, versions, rows).
        link: The UI page that shows it (a path under the UI's address).
        at: When it happened (epoch seconds).
        source: What it was seen in (an event's storage id, a run id): unique per signal.
        title: The message's title, when not the event's own.
    """

    event: AlertEvent
    subject: str
    change: Change
    severity: Severity
    summary: str
    advice: str | None = None
    figures: dict[str, Figure] = field(default_factory=dict)
    link: str | None = None
    at: float = 0.0
    source: str = ""
    title: str | None = None


@dataclass(frozen=True)
class Alert:
    """One message: an incident opened or resolved, or an event (`status`).

    `id` is stable (the incident's opening source and the status), so a delivery repeated
    after a crash can be recognised by a receiver (the webhook's `id`, the mail's Message-ID).
    """

    id: str
    event: AlertEvent
    status: str
    subject: str
    severity: Severity
    title: str
    summary: str
    advice: str | None
    figures: dict[str, Figure]
    link: str | None
    at: float
    opened_at: float | None = None

    def as_json(self) -> dict[str, Any]:
        """The alert as plain JSON values."""
        return {**asdict(self), "event": self.event.value, "severity": self.severity.value}

    @classmethod
    def of_json(cls, raw: dict[str, Any]) -> Alert:
        """The alert `as_json` gave."""
        return cls(
            **{**raw, "event": AlertEvent(raw["event"]), "severity": Severity(raw["severity"])}
        )


def _alert(signal: Signal, status: str, incident: str, opened_at: float | None = None) -> Alert:
    opened, resolved = TITLES[signal.event]
    title = signal.title or (resolved if status == "resolved" else opened)
    return Alert(
        id=f"{incident}:{status}",
        event=signal.event,
        status=status,
        subject=signal.subject,
        severity=signal.severity,
        title=title,
        summary=signal.summary,
        advice=signal.advice,
        figures=dict(signal.figures),
        link=signal.link,
        at=signal.at,
        opened_at=opened_at,
    )


@dataclass
class IncidentBook:
    """The open incidents, by `<event>:<subject>`: each its id and when it opened."""

    open: dict[str, dict[str, Any]] = field(default_factory=dict)

    def fold(self, signal: Signal) -> list[Alert]:
        """The messages `signal` calls for (none, one, or an opening and its end)."""
        key = f"{signal.event.value}:{signal.subject}"
        if signal.change is Change.ONCE:
            return [_alert(signal, "event", f"{key}:{signal.source}")]
        if signal.change is Change.CLEAR:
            incident = self.open.pop(key, None)
            if incident is None:
                return []
            severity = Severity(incident["severity"])
            ended = replace(signal, severity=severity)
            return [_alert(ended, "resolved", incident["id"], incident["opened_at"])]
        if key in self.open:
            return []
        lost = f"{AlertEvent.WINDOW_LOST.value}:{signal.subject}"
        if signal.event is AlertEvent.WINDOW_AT_RISK and lost in self.open:
            return []  # the loss says more; its repair ends both
        if signal.event is AlertEvent.WINDOW_LOST:
            self.open.pop(f"{AlertEvent.WINDOW_AT_RISK.value}:{signal.subject}", None)
        opened = f"{key}:{signal.source}"
        self.open[key] = {"id": opened, "opened_at": signal.at, "severity": signal.severity.value}
        return [_alert(signal, "opened", opened)]
