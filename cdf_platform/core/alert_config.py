"""The `alerts:` section of a pipelines file (or of `CdfPipelinesComponent`): where the
platform's alerts go (Slack, a JSON webhook, email over SMTP) and which events go where.

Every text value may be `{env: NAME}`: a token, a password or a webhook URL is read from the
environment when the definitions load, never written into the file.

Example (YAML):

    alerts:
      ui_url: https://dagster.internal       # links in every message
      targets:
        data-team:
          slack: {token: {env: SLACK_BOT_TOKEN}, channel: "#data-alerts"}
        pager:
          webhook: {url: {env: PAGER_WEBHOOK_URL}}
        on-call:
          email: {host: smtp.internal, port: 587, starttls: true, sender: cdf@corp.example,
                  to: [oncall@corp.example], username: {env: SMTP_USER},
                  password: {env: SMTP_PASSWORD}}
      routes:
        - targets: [data-team]                # every event, every severity
        - targets: [pager, on-call]
          min_severity: critical
          events: [window_lost, verification_mismatch, run_failed]

    >>> config = AlertConfig.parse({"targets": {"hook": {"webhook": {"url": "http://h/"}}}},
    ...                            origin="pipelines.yaml")
    >>> config.routed(AlertEvent.WINDOW_LOST, Severity.CRITICAL, "orders")
    ['hook']
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cdf_platform.core.cloud_options import EnvRef, Text
from cdf_platform.core.errors import InvalidAlertConfig


class AlertEvent(StrEnum):
    """What an alert is about. An incident (at risk, lost, quarantine, foreign write,
    mismatch, failed run) is told once when it opens and once when it ends; an event (repair
    started, destructive action) once."""

    WINDOW_AT_RISK = "window_at_risk"
    WINDOW_LOST = "window_lost"
    REPAIR_STARTED = "repair_started"
    DESTRUCTIVE_ACTION = "destructive_action"
    QUARANTINE = "quarantine"
    FOREIGN_WRITE = "foreign_write"
    VERIFICATION_MISMATCH = "verification_mismatch"
    RUN_FAILED = "run_failed"


class Severity(StrEnum):
    """How urgent an alert is, lowest first."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warning, 2 for critical."""
        return list(Severity).index(self)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SlackTarget(_Strict):
    """A Slack channel, posted to with a bot token through dagster-slack's client."""

    # Secrets stay out of every repr (a log line, an error): `repr=False`.
    token: Text = Field(
        repr=False, description="The bot token (xoxb-...); `{env: NAME}` keeps it out."
    )
    channel: str = Field(description="The channel, e.g. `#data-alerts`, or its id.")
    api_url: str = Field(
        default="https://slack.com/api/",
        description="Slack's Web API base URL (a proxy or a compatible server may serve it).",
    )


class WebhookTarget(_Strict):
    """An HTTP endpoint that takes one JSON document per message (POST)."""

    url: Text = Field(
        repr=False, description="The endpoint's URL; `{env: NAME}` if it carries a secret."
    )
    headers: dict[str, Text] = Field(
        default_factory=dict,
        repr=False,
        description="Extra request headers, e.g. an Authorization.",
    )


class EmailTarget(_Strict):
    """Mail through an SMTP server."""

    host: str = Field(description="The SMTP server's host.")
    port: int = Field(default=25, ge=1, le=65535, description="Its port (587 with starttls).")
    sender: str = Field(description="The From address.")
    to: list[str] = Field(min_length=1, description="The recipients.")
    starttls: bool = Field(default=False, description="Upgrade the connection with STARTTLS.")
    username: Text | None = Field(
        default=None, repr=False, description="Login, if the server wants one."
    )
    password: Text | None = Field(default=None, repr=False, description="Its password.")


class AlertTarget(_Strict):
    """One named destination: exactly one of `slack`, `webhook`, `email`."""

    slack: SlackTarget | None = None
    webhook: WebhookTarget | None = None
    email: EmailTarget | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> AlertTarget:
        kinds = [name for name in ("slack", "webhook", "email") if getattr(self, name)]
        if len(kinds) != 1:
            raise ValueError(f"give exactly one of slack, webhook, email (got {kinds or 'none'})")
        return self

    @property
    def kind(self) -> str:
        """`slack`, `webhook` or `email`."""
        return next(name for name in ("slack", "webhook", "email") if getattr(self, name))


class AlertRoute(_Strict):
    """Which alerts go to which targets."""

    targets: list[str] = Field(min_length=1, description="Names of `targets` entries.")
    events: list[AlertEvent] | None = Field(
        default=None, description="The events routed (default: all of them)."
    )
    min_severity: Severity = Field(
        default=Severity.INFO, description="Route only alerts at this severity or above."
    )
    pipelines: list[str] | None = Field(
        default=None, description="Only these pipelines (default: all)."
    )

    def takes(self, event: AlertEvent, severity: Severity, pipeline: str) -> bool:
        """Whether an alert of `event` at `severity` about `pipeline` goes this route."""
        return (
            (self.events is None or event in self.events)
            and severity.rank >= self.min_severity.rank
            and (self.pipelines is None or pipeline in self.pipelines)
        )


class AlertConfig(_Strict):
    """The `alerts:` section: named targets, routes, and the figures alerts link and judge."""

    targets: dict[str, AlertTarget] = Field(description="Destinations by name.")
    routes: list[AlertRoute] = Field(
        default_factory=list,
        description="Which events go where (default: every event to every target).",
    )
    ui_url: str | None = Field(
        default=None, description="The Dagster UI's address, for a link in every message."
    )
    quarantine_rows_above: int = Field(
        default=0, ge=0, description="A quarantine alert opens when it holds more rows."
    )
    retry_hours: float = Field(
        default=24.0, gt=0, description="Delivery to a target that fails is retried this long."
    )

    @model_validator(mode="after")
    def _known_targets(self) -> AlertConfig:
        for route in self.routes:
            unknown = sorted(set(route.targets) - set(self.targets))
            if unknown:
                raise ValueError(
                    f"routes name unknown targets {unknown}; known: {sorted(self.targets)}"
                )
        return self

    @classmethod
    def parse(cls, section: Any, *, origin: str) -> AlertConfig | None:
        """Validate an `alerts:` section (None: there is none).

        Raises:
            InvalidAlertConfig: the section is malformed.
        """
        if section is None:
            return None
        if not isinstance(section, Mapping):
            raise InvalidAlertConfig(
                f"`alerts:` in {origin} must be a mapping with `targets:`",
                action="write `alerts: {targets: {name: {webhook: {url: ...}}}}`",
            )
        try:
            return cls.model_validate(section)
        except ValidationError as err:
            where = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or 'alerts'}: {item['msg']}"
                for item in err.errors()
            )
            raise InvalidAlertConfig(f"`alerts:` in {origin}: {where}") from err

    def routed(self, event: AlertEvent, severity: Severity, pipeline: str) -> list[str]:
        """The targets an alert goes to, in the order they are named (every target when no
        route is configured)."""
        if not self.routes:
            return list(self.targets)
        chosen = {
            name
            for route in self.routes
            if route.takes(event, severity, pipeline)
            for name in route.targets
        }
        return [name for name in self.targets if name in chosen]

    def resolved(self, environ: Mapping[str, str]) -> AlertConfig:
        """This configuration with every `{env: NAME}` read from `environ`.

        Raises:
            InvalidAlertConfig: a referenced variable is not set.
        """
        return AlertConfig.model_validate(_resolve(self.model_dump(), environ, "alerts"))


def _resolve(value: Any, environ: Mapping[str, str], where: str) -> Any:
    if isinstance(value, dict) and set(value) == {"env"} and isinstance(value["env"], str):
        name = EnvRef.model_validate(value).env
        if name not in environ:
            raise InvalidAlertConfig(
                f"{where} reads the environment variable {name}, which is not set",
                action=f"set {name} in the environment of every process that loads the "
                "definitions (the code server, the run worker and its runs), or "
                "correct the reference",
            )
        return environ[name]
    if isinstance(value, dict):
        return {key: _resolve(item, environ, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, environ, f"{where}[{i}]") for i, item in enumerate(value)]
    return value
