"""The `alerts:` section: targets of one kind each, routes naming known targets and choosing by
event, severity and pipeline, secrets read from the environment, and every malformed entry a
classified error that names it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cdf_platform.core.alert_config import AlertConfig, AlertEvent, Severity
from cdf_platform.core.errors import InvalidAlertConfig
from cdf_platform.core.spec.spec_file import load_alerts, load_specs

TARGETS = {
    "slack": {"slack": {"token": {"env": "TEST_SLACK_TOKEN"}, "channel": "#data"}},
    "hook": {"webhook": {"url": "http://127.0.0.1:1/hook"}},
    "mail": {"email": {"host": "127.0.0.1", "sender": "cdf@x", "to": ["oncall@x"]}},
}


def test_routes_choose_targets_by_event_severity_and_pipeline() -> None:
    config = AlertConfig.parse(
        {
            "targets": TARGETS,
            "routes": [
                {"targets": ["slack"]},
                {
                    "targets": ["hook", "mail"],
                    "min_severity": "critical",
                    "events": ["window_lost"],
                },
                {"targets": ["mail"], "pipelines": ["payments"]},
            ],
        },
        origin="test",
    )
    assert config is not None
    lost, at_risk = AlertEvent.WINDOW_LOST, AlertEvent.WINDOW_AT_RISK
    assert config.routed(lost, Severity.CRITICAL, "orders") == ["slack", "hook", "mail"]
    assert config.routed(at_risk, Severity.WARNING, "orders") == ["slack"]
    assert config.routed(at_risk, Severity.WARNING, "payments") == ["slack", "mail"]
    # No routes: every alert to every target.
    plain = AlertConfig.parse({"targets": TARGETS}, origin="test")
    assert plain is not None and plain.routed(at_risk, Severity.INFO, "x") == list(TARGETS)


def test_secrets_are_read_from_the_environment_and_a_missing_one_is_named() -> None:
    config = AlertConfig.parse({"targets": TARGETS}, origin="test")
    assert config is not None
    resolved = config.resolved({"TEST_SLACK_TOKEN": "xoxb-1"})
    assert resolved.targets["slack"].slack is not None
    assert resolved.targets["slack"].slack.token == "xoxb-1"
    with pytest.raises(
        InvalidAlertConfig,
        match=r"alerts\.targets\.slack\.slack\.token reads the "
        r"environment variable TEST_SLACK_TOKEN, which is not set",
    ):
        config.resolved({})


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"targets": {"x": {}}}, "targets.x: Value error, give exactly one of slack, webhook"),
        (
            {"targets": {"x": {"webhook": {"url": "u"}, "email": TARGETS["mail"]["email"]}}},
            "got ['webhook', 'email']",
        ),
        (
            {"targets": TARGETS, "routes": [{"targets": ["pager"]}]},
            "routes name unknown targets ['pager']",
        ),
        (
            {"targets": TARGETS, "routes": [{"targets": ["hook"], "events": ["window_gone"]}]},
            "routes.0.events.0",
        ),
        ({"targets": {"x": {"webhook": {"url": "u", "retries": 3}}}}, "retries: Extra inputs"),
        (["hook"], "must be a mapping with `targets:`"),
    ],
)
def test_a_malformed_section_is_a_classified_error_naming_the_entry(
    section: object, named: str
) -> None:
    with pytest.raises(InvalidAlertConfig) as raised:
        AlertConfig.parse(section, origin="pipelines.yaml")
    assert named in str(raised.value)
    assert "pipelines.yaml" in str(raised.value)
    assert raised.value.incident_code == "INVALID_ALERT_CONFIG"


def test_the_pipelines_file_carries_the_section_and_a_bad_one_stops_its_loading(
    tmp_path: Path,
) -> None:
    file = tmp_path / "pipelines.yaml"
    pipeline = {"id": "orders", "source": "b", "target": "s", "keys": ["k"]}
    file.write_text(
        yaml.safe_dump({"pipelines": [pipeline], "alerts": {"targets": TARGETS}}, sort_keys=False)
    )
    config = load_alerts(file)
    assert config is not None and list(config.targets) == ["slack", "hook", "mail"]
    file.write_text(yaml.safe_dump({"pipelines": [pipeline], "alerts": {"targets": []}}))
    with pytest.raises(InvalidAlertConfig, match="targets: Input should be a valid dictionary"):
        load_specs(file)
    file.write_text(yaml.safe_dump({"pipelines": [pipeline]}))
    assert load_alerts(file) is None


def test_no_secret_reaches_a_repr() -> None:
    config = AlertConfig.parse(
        {
            "targets": {
                **TARGETS,
                "hook": {"webhook": {"url": "https://h/T0K3N", "headers": {"X-Key": "S3CR3T"}}},
                "mail": {"email": {**TARGETS["mail"]["email"], "password": "PA55"}},
            }
        },
        origin="test",
    )
    assert config is not None
    shown = repr(config.resolved({"TEST_SLACK_TOKEN": "xoxb-V4LUE"}))
    assert all(secret not in shown for secret in ("xoxb-V4LUE", "T0K3N", "S3CR3T", "PA55"))
