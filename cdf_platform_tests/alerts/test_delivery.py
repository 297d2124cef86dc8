"""Delivery to real receivers on loopback: a JSON webhook, Slack's Web API through
dagster-slack's client, and an SMTP server, each a process of its own. Every message carries
the pipeline, the figures, the advice and the link; a receiver that is down gets its messages
once it is back (the outbox keeps them, retried with a growing delay) and one that never comes
back is given up after `retry_hours`, said in the log."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from cdf_platform.alerts.delivery import AlertState, Sender, deliver
from cdf_platform.alerts.incidents import Change, IncidentBook, Signal
from cdf_platform.core.alert_config import AlertConfig, AlertEvent, Severity
from cdf_platform.orchestration.sensors.alert_sensor import senders
from cdf_platform_testkit.receivers import HttpReceiver, SmtpReceiver, alert_targets

LOG = logging.getLogger("alerts-test")


def config_for(http: HttpReceiver, smtp: SmtpReceiver, **extra: Any) -> AlertConfig:
    targets = alert_targets(http, smtp)
    targets["hook"]["webhook"]["headers"] = {"Authorization": "Bearer t"}
    config = AlertConfig.parse(
        {"ui_url": "http://dagster.test", "targets": targets, **extra}, origin="test"
    )
    assert config is not None
    return config


def lost(at: float) -> Signal:
    return Signal(
        AlertEvent.WINDOW_LOST,
        "orders",
        Change.OPEN,
        Severity.CRITICAL,
        "replay window lost: bronze version 2 left the window",
        "nothing: the platform rebuilds",
        {"watermark": 1, "latest_version": "4"},
        "/assets/silver/orders?view=checks",
        at,
        "17",
    )


def test_each_receiver_gets_the_pipeline_figures_advice_and_link(
    alert_receivers: tuple[HttpReceiver, SmtpReceiver],
) -> None:
    http, smtp = alert_receivers
    config = config_for(http, smtp)
    state = AlertState(book=IncidentBook())
    state.post(state.book.fold(lost(100.0)), config, now=100.0)
    saved: list[str] = []
    done = deliver(
        state, senders(config), config, now=100.0, save=lambda s: saved.append(s.dumps()), log=LOG
    )
    assert sorted(target for target, _ in done.sent) == ["hook", "mail", "team"]
    assert not state.outbox and len(saved) == 3  # saved after each delivery

    (hook,) = [r for r in http.received() if r["path"] == "/hook"]
    assert hook["body"] == {
        "id": "window_lost:orders:17:opened",
        "event": "window_lost",
        "status": "opened",
        "severity": "critical",
        "pipeline": "orders",
        "title": "[cdf_platform] orders: replay window lost",
        "summary": "replay window lost: bronze version 2 left the window",
        "advice": "nothing: the platform rebuilds",
        "figures": {"watermark": 1, "latest_version": "4"},
        "url": "http://dagster.test/assets/silver/orders?view=checks",
        "at": "1970-01-01T00:01:40+00:00",
        "opened_at": None,
    }
    (slack,) = [r for r in http.received() if r["path"] == "/api/chat.postMessage"]
    assert slack["body"]["channel"] == "#data"
    text = slack["body"]["text"]
    assert text.startswith(":red_circle: *[cdf_platform] orders: replay window lost*")
    assert "Figures: watermark 1, latest_version 4" in text
    assert "What to do: nothing: the platform rebuilds" in text
    assert "http://dagster.test/assets/silver/orders?view=checks" in text
    (mail,) = smtp.received()
    assert mail["subject"] == "[cdf_platform] orders: replay window lost"
    assert mail["to"] == ["oncall@test"] and mail["event"] == "window_lost; status=opened"
    assert "What to do: nothing: the platform rebuilds" in mail["body"]


def test_a_receiver_that_is_down_gets_its_messages_once_it_is_back(
    alert_receivers: tuple[HttpReceiver, SmtpReceiver], caplog: pytest.LogCaptureFixture
) -> None:
    http, smtp = alert_receivers
    config = config_for(http, smtp, routes=[{"targets": ["hook"]}])
    targets: dict[str, Sender] = senders(config)
    state = AlertState(book=IncidentBook())
    for at, source in ((10.0, "1"), (11.0, "2")):
        signal = Signal(
            AlertEvent.REPAIR_STARTED,
            "orders",
            Change.ONCE,
            Severity.INFO,
            "repair",
            at=at,
            source=source,
        )
        state.post(state.book.fold(signal), config, now=at)
    before = len(http.received())
    http.stop()
    try:
        down = deliver(state, targets, config, now=20.0, save=lambda s: None, log=LOG)
        # Tried once per round: the second message waits behind the first's failure.
        assert len(down.failed) == 1 and not down.sent and len(state.outbox) == 2
        assert state.outbox[0]["attempts"] == 1 and state.outbox[0]["next_at"] == 30.0
        early = deliver(state, targets, config, now=25.0, save=lambda s: None, log=LOG)
        assert not early.failed and not early.sent  # not due yet
        again = deliver(state, targets, config, now=30.0, save=lambda s: None, log=LOG)
        assert state.outbox[0]["attempts"] == 2 and state.outbox[0]["next_at"] == 50.0
        assert "not delivered (attempt 2; next in 20 s)" in caplog.text and again.failed
    finally:
        http.start()
    back = deliver(state, targets, config, now=50.0, save=lambda s: None, log=LOG)
    assert len(back.sent) == 2 and not state.outbox
    ids = [r["body"]["id"] for r in http.received()[before:]]
    assert ids == ["repair_started:orders:1:event", "repair_started:orders:2:event"]


def test_a_target_that_never_comes_back_is_given_up_after_retry_hours(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nothing_listens = {"webhook": {"url": "http://127.0.0.1:9/hook"}}
    config = AlertConfig.parse({"targets": {"hook": nothing_listens}, "retry_hours": 1}, origin="t")
    assert config is not None
    state = AlertState(book=IncidentBook())
    state.post(state.book.fold(lost(0.0)), config, now=0.0)
    deliver(state, senders(config), config, now=0.0, save=lambda s: None, log=LOG)
    assert len(state.outbox) == 1
    late = deliver(state, senders(config), config, now=3601.0, save=lambda s: None, log=LOG)
    assert late.given_up and not state.outbox
    assert "given up after 2 attempts over 1.0 h" in caplog.text
