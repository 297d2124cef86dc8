"""A run whose warm engine is away waits for it, for a bounded and logged while, and an engine's
loss is said in words.

The deployment's engine (`cdf-platform engine`, a Spark Connect server) is a process like the
daemon: its supervisor restarts it within seconds to minutes. A run that needs Spark while the
engine is away does not fail at once (its step retries, 15 s and 30 s apart, would be spent in
45 s): `connect_when_engine_answers` tries to connect every `ENGINE_POLL_SECONDS`, says once
that the engine is unreachable (its address, since when, why), then every
`ENGINE_WAIT_REPORT_SECONDS` how long it has waited, and that it answers again; after the bound
it gives up with an `EngineUnavailable` naming all of that. A run that was using the engine when
it died fails its step as the engine's loss (`cdf_platform.spark.runtime.failures.engine_loss`): the
retry connects again, in a session of its own, through the same wait.

Example:
    >>> connect_when_engine_answers(lambda: "session", "sc://127.0.0.1:15002", 60, print)
    'session'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from cdf_platform.core.errors import EngineUnavailable
from cdf_platform.spark.runtime.failures import ENGINE_ACTION

T = TypeVar("T")

# How long a run of a deployment waits for its engine by default (`SparkResource`): an engine
# restarted by its supervisor is back within a minute; ten cover an outage of minutes.
DEFAULT_ENGINE_WAIT_SECONDS = 600.0
# How often a waiting run tries the engine again: a connect attempt that nothing answers costs
# a refused socket, so a run resumes within this long of the engine's return.
ENGINE_POLL_SECONDS = 2.0
# How often a waiting run says it still waits (beside its first and last word).
ENGINE_WAIT_REPORT_SECONDS = 30.0


def connect_when_engine_answers(
    connect: Callable[[], T],
    remote: str,
    wait_seconds: float,
    report: Callable[[str], None],
) -> T:
    """`connect()`, tried again every `ENGINE_POLL_SECONDS` while it raises `EngineUnavailable`,
    for at most `wait_seconds`; `report` gets the wait's news (unreachable since, still waiting,
    back). Any other failure passes through at once, and every failure when `wait_seconds` is 0.

    Raises:
        EngineUnavailable: the engine at `remote` did not answer within `wait_seconds`: the
            message names its address, since when it is unreachable, why, and the wait.
    """
    if wait_seconds <= 0:
        return connect()  # no wait: the first refusal as it is
    started = time.monotonic()
    since: datetime | None = None
    reported = started
    while True:
        try:
            connected = connect()
        except EngineUnavailable as err:
            now = time.monotonic()
            waited = now - started
            if since is None:
                since = datetime.now(UTC)
                report(
                    f"engine unreachable at {remote} since {since:%H:%M:%S} UTC ({err.problem}); "
                    f"the run waits up to {wait_seconds:.0f} s for it"
                )
            if waited >= wait_seconds:
                raise EngineUnavailable(
                    f"the engine at {remote} has been unreachable since "
                    f"{since:%Y-%m-%d %H:%M:%S} UTC ({err.problem}); the run waited "
                    f"{waited:.0f} s for it",
                    action=ENGINE_ACTION,
                ) from err
            if now - reported >= ENGINE_WAIT_REPORT_SECONDS:
                reported = now
                report(
                    f"engine at {remote} still unreachable after {waited:.0f} s "
                    f"(waiting up to {wait_seconds:.0f} s)"
                )
            time.sleep(min(ENGINE_POLL_SECONDS, max(0.0, wait_seconds - waited)))
            continue
        if since is not None:
            report(
                f"engine at {remote} answers again after {time.monotonic() - started:.0f} s: "
                "the run goes on"
            )
        return connected
