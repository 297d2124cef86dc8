"""Incidents open once and end once: a signal seen again while its incident is open says
nothing, a lost window supersedes its at-risk incident, and one-off events are a message each;
the state survives a round trip through its JSON."""

from __future__ import annotations

from cdf_platform.alerts.delivery import AlertState
from cdf_platform.alerts.incidents import Change, IncidentBook, Signal
from cdf_platform.core.alert_config import AlertEvent, Severity

RISK, LOST = AlertEvent.WINDOW_AT_RISK, AlertEvent.WINDOW_LOST


def seen(event: AlertEvent, change: Change, source: str, subject: str = "orders") -> Signal:
    severity = Severity.CRITICAL if event is LOST else Severity.WARNING
    return Signal(
        event, subject, change, severity, f"{event} {change}", at=float(source), source=source
    )


def test_an_incident_is_told_when_it_opens_and_when_it_ends_only() -> None:
    book = IncidentBook()
    said = [
        (alert.event.value, alert.status, alert.title)
        for signal in [
            seen(RISK, Change.OPEN, "1"),
            seen(RISK, Change.OPEN, "2"),  # still at risk: nothing
            seen(RISK, Change.OPEN, "3", subject="customers"),
            seen(LOST, Change.CLEAR, "4"),  # nothing open to end
            seen(LOST, Change.OPEN, "5"),  # the loss ends the risk without a word
            seen(RISK, Change.OPEN, "6"),  # at risk while lost: the loss says more
            seen(LOST, Change.OPEN, "7"),
            seen(RISK, Change.CLEAR, "8"),
            seen(LOST, Change.CLEAR, "9"),
            seen(LOST, Change.CLEAR, "10"),
            seen(AlertEvent.REPAIR_STARTED, Change.ONCE, "11"),
            seen(AlertEvent.REPAIR_STARTED, Change.ONCE, "12"),
        ]
        for alert in book.fold(signal)
    ]
    assert said == [
        ("window_at_risk", "opened", "replay window at risk"),
        ("window_at_risk", "opened", "replay window at risk"),
        ("window_lost", "opened", "replay window lost"),
        ("window_lost", "resolved", "replay window repaired"),
        ("repair_started", "event", "repair started"),
        ("repair_started", "event", "repair started"),
    ]
    assert list(book.open) == ["window_at_risk:customers"]


def test_a_resolve_keeps_the_incident_s_id_severity_and_opening_time() -> None:
    book = IncidentBook()
    (opened,) = book.fold(seen(LOST, Change.OPEN, "5"))
    state = AlertState(cursors={"checks": {}}, book=book)
    again = AlertState.loads(state.dumps())  # the instance keeps it as JSON
    (resolved,) = again.book.fold(
        Signal(LOST, "orders", Change.CLEAR, Severity.INFO, "rebuilt", at=65.0, source="9")
    )
    assert opened.id == "window_lost:orders:5:opened"
    assert resolved.id == "window_lost:orders:5:resolved"
    assert resolved.severity is Severity.CRITICAL and resolved.opened_at == 5.0
    assert again.cursors == {"checks": {}} and not again.book.open
