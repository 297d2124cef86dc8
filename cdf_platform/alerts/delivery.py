"""Delivery: each alert to each target its routes name, through an outbox kept with the
incidents (`AlertState`), so a target that is down gets its messages once it is back and a
restart of the process that sends them loses none.

A delivery is written to the outbox before it is tried and taken out once the target accepted
it (the state saved after each), so a message is sent again only if the process dies between
the target's answer and that save; the webhook's `id` and the mail's Message-ID are the same
then. A failing target is tried again after 10 s, 20 s, 40 s ... (at most every 5 minutes) for
`retry_hours`, then given up, and said so in the log. A target's messages go in the order they
were raised: the first it has not taken holds back the others, so a target that is down costs
one timeout per round, and gets "at risk", "lost" and "repaired" in that order once it is back.

Example:
    >>> payload = webhook_payload(alert)  # doctest: +SKIP
    >>> payload["event"], payload["status"]  # doctest: +SKIP
    ('window_lost', 'opened')
"""

from __future__ import annotations

import datetime
import hashlib
import json
import logging
import smtplib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any, Protocol

from cdf_platform.alerts.incidents import Alert, IncidentBook
from cdf_platform.core.alert_config import AlertConfig, EmailTarget, Severity, WebhookTarget

TIMEOUT_SECONDS = 10.0
FIRST_RETRY_SECONDS = 10.0
LONGEST_RETRY_SECONDS = 300.0


class DeliveryFailed(Exception):
    """A target did not take a message (unreachable, refused, an error answer)."""


class Sender(Protocol):
    """Sends one alert to one target, or raises `DeliveryFailed`."""

    def send(self, alert: Alert) -> None: ...


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).isoformat(timespec="seconds")


def _url(alert: Alert, ui_url: str | None) -> str | None:
    if ui_url is None or alert.link is None:
        return None
    return ui_url.rstrip("/") + alert.link


def _figures(alert: Alert) -> str:
    return ", ".join(
        f"{name} {value}" for name, value in alert.figures.items() if value is not None
    )


def text_of(alert: Alert, ui_url: str | None) -> str:
    """The message as plain text: what happened, its figures, what to do, the link."""
    lines = [alert.summary]
    if figures := _figures(alert):
        lines.append(f"Figures: {figures}")
    if alert.advice:
        lines.append(f"What to do: {alert.advice}")
    if alert.opened_at is not None and alert.status == "resolved":
        lines.append(
            f"Open since {_when(alert.opened_at)} ({(alert.at - alert.opened_at) / 60:.1f} min)"
        )
    if url := _url(alert, ui_url):
        lines.append(url)
    return "\n".join(lines)


def title_of(alert: Alert) -> str:
    """`[cdf_platform] <subject>: <title>`, resolved ones marked so."""
    mark = "RESOLVED " if alert.status == "resolved" else ""
    return f"[cdf_platform] {mark}{alert.subject}: {alert.title}"


def webhook_payload(alert: Alert, ui_url: str | None = None) -> dict[str, Any]:
    """The JSON document a webhook receives (its `id` is the same for a repeated delivery)."""
    return {
        "id": alert.id,
        "event": alert.event.value,
        "status": alert.status,
        "severity": alert.severity.value,
        "pipeline": alert.subject,
        "title": title_of(alert),
        "summary": alert.summary,
        "advice": alert.advice,
        "figures": alert.figures,
        "url": _url(alert, ui_url),
        "at": _when(alert.at),
        "opened_at": None if alert.opened_at is None else _when(alert.opened_at),
    }


@dataclass(frozen=True)
class WebhookSender:
    """POSTs `webhook_payload` as JSON; any 2xx answer is taken."""

    target: WebhookTarget
    ui_url: str | None = None

    def send(self, alert: Alert) -> None:
        """Raises DeliveryFailed on no answer or a non-2xx answer."""
        body = json.dumps(webhook_payload(alert, self.ui_url)).encode()
        headers = {
            "Content-Type": "application/json",
            **{k: str(v) for k, v in self.target.headers.items()},
        }
        request = urllib.request.Request(str(self.target.url), body, headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
                answer.read()
        except (urllib.error.URLError, OSError) as err:
            raise DeliveryFailed(f"webhook {_host(str(self.target.url))}: {err}") from err


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


@dataclass(frozen=True)
class EmailSender:
    """Mails the alert's text through an SMTP server."""

    target: EmailTarget
    ui_url: str | None = None

    def message(self, alert: Alert) -> EmailMessage:
        """The mail (its Message-ID derived from the alert's id)."""
        mail = EmailMessage()
        mail["Subject"] = title_of(alert)
        mail["From"] = self.target.sender
        mail["To"] = ", ".join(self.target.to)
        digest = hashlib.sha256(alert.id.encode()).hexdigest()[:32]
        mail["Message-ID"] = f"<{digest}@cdf-platform>"
        mail["X-Cdf-Event"] = f"{alert.event.value}; status={alert.status}"
        mail.set_content(text_of(alert, self.ui_url))
        return mail

    def send(self, alert: Alert) -> None:
        """Raises DeliveryFailed when the server is unreachable or refuses the mail."""
        target = self.target
        try:
            with smtplib.SMTP(target.host, target.port, timeout=TIMEOUT_SECONDS) as smtp:
                if target.starttls:
                    smtp.starttls()
                if target.username is not None:
                    smtp.login(str(target.username), str(target.password or ""))
                smtp.send_message(self.message(alert))
        except (smtplib.SMTPException, OSError) as err:
            raise DeliveryFailed(f"SMTP {target.host}:{target.port}: {err}") from err


SEVERITY_MARKS = {
    Severity.INFO: ":information_source:",
    Severity.WARNING: ":warning:",
    Severity.CRITICAL: ":red_circle:",
}


def slack_text(alert: Alert, ui_url: str | None) -> str:
    """The Slack message: a marked bold title, then the text."""
    mark = ":white_check_mark:" if alert.status == "resolved" else SEVERITY_MARKS[alert.severity]
    return f"{mark} *{title_of(alert)}*\n{text_of(alert, ui_url)}"


@dataclass(frozen=True)
class SlackSender:
    """Posts to a channel with `post(channel, text)` (dagster-slack's client, bound by the
    Dagster side); any exception it raises is a failed delivery."""

    post: Callable[[str, str], None]
    channel: str
    ui_url: str | None = None

    def send(self, alert: Alert) -> None:
        """Raises DeliveryFailed when Slack (or its client) raises."""
        try:
            self.post(self.channel, slack_text(alert, self.ui_url))
        except Exception as err:
            raise DeliveryFailed(f"Slack channel {self.channel}: {err}") from err


@dataclass
class AlertState:
    """What the alerts keep between rounds: the positions read up to (the reader's), the open
    incidents and the deliveries not yet accepted (JSON, in the Dagster instance)."""

    cursors: dict[str, Any] = field(default_factory=dict)
    book: IncidentBook = field(default_factory=IncidentBook)
    outbox: list[dict[str, Any]] = field(default_factory=list)

    def dumps(self) -> str:
        """The state as JSON text."""
        return json.dumps({"cursors": self.cursors, "open": self.book.open, "outbox": self.outbox})

    @classmethod
    def loads(cls, text: str | None) -> AlertState:
        """The state `dumps` gave (a fresh one for None)."""
        if not text:
            return cls()
        raw = json.loads(text)
        return cls(raw["cursors"], IncidentBook(raw["open"]), raw["outbox"])

    def post(self, alerts: list[Alert], config: AlertConfig, now: float) -> None:
        """Put each alert in the outbox once per target its routes name."""
        for alert in alerts:
            for target in config.routed(alert.event, alert.severity, alert.subject):
                self.outbox.append(
                    {
                        "alert": alert.as_json(),
                        "target": target,
                        "attempts": 0,
                        "first_at": now,
                        "next_at": now,
                    }
                )


@dataclass(frozen=True)
class Delivered:
    """What a round of delivery did."""

    sent: list[tuple[str, str]]
    failed: list[tuple[str, str, str]]
    given_up: list[tuple[str, str, str]]


def deliver(
    state: AlertState,
    senders: Mapping[str, Sender],
    config: AlertConfig,
    *,
    now: float,
    save: Callable[[AlertState], None],
    log: logging.Logger | logging.LoggerAdapter[Any],
) -> Delivered:
    """Try the due deliveries of the outbox, each target's in order until one fails or is
    not due, saving the state after each; returns what was sent and what failed."""
    sent: list[tuple[str, str]] = []
    failed: list[tuple[str, str, str]] = []
    given_up: list[tuple[str, str, str]] = []
    # A target's messages go in order: one not due yet, or failing, holds back the rest.
    held: set[str] = set()
    for item in list(state.outbox):
        target, alert = item["target"], Alert.of_json(item["alert"])
        sender = senders.get(target)
        if sender is None:  # the target was removed from the configuration
            state.outbox.remove(item)
            continue
        if target in held or item["next_at"] > now:
            held.add(target)
            continue
        try:
            sender.send(alert)
        except DeliveryFailed as err:
            held.add(target)
            item["attempts"] += 1
            if now - item["first_at"] > config.retry_hours * 3600:
                state.outbox.remove(item)
                given_up.append((target, alert.id, str(err)))
                log.error(
                    "alert %s to %s given up after %d attempts over %.1f h: %s",
                    alert.id,
                    target,
                    item["attempts"],
                    config.retry_hours,
                    err,
                )
            else:
                delay = min(
                    FIRST_RETRY_SECONDS * 2 ** (item["attempts"] - 1), LONGEST_RETRY_SECONDS
                )
                item["next_at"] = now + delay
                failed.append((target, alert.id, str(err)))
                log.warning(
                    "alert %s to %s not delivered (attempt %d; next in %.0f s): %s",
                    alert.id,
                    target,
                    item["attempts"],
                    delay,
                    err,
                )
            save(state)
            continue
        state.outbox.remove(item)
        sent.append((target, alert.id))
        save(state)
        log.info("alert %s delivered to %s", alert.id, target)
    return Delivered(sent, failed, given_up)
