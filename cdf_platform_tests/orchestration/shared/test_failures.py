"""Platform errors at the Dagster boundary: every step failure carries its incident code, and
only a retryable class (a concurrent write, an unreachable store) lets Dagster retry the step;
silver steps retry under a policy for those. Every error class is classified one way or the
other, and the public API exports each. A run whose engine does not answer waits for it, for a
bounded while it says in the run's log."""

from __future__ import annotations

import inspect
import time

import pytest

import cdf_platform
from cdf_platform.core import errors
from cdf_platform.core.errors import CdfPlatformError, EngineUnavailable
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.assets.silver import silver_asset
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.orchestration.shared.step_failures import STEP_RETRY_POLICY, platform_failure
from cdf_platform.services.service import free_port

RETRYABLE = {"ConcurrentWriteConflict", "EngineUnavailable", "StorageUnreachable"}


def error_classes() -> dict[str, type[CdfPlatformError]]:
    return {
        name: cls
        for name, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, CdfPlatformError) and cls is not CdfPlatformError
    }


def test_only_transient_failures_allow_retries_and_each_carries_its_incident_code() -> None:
    classes = error_classes()
    assert set(classes) > RETRYABLE
    for name, cls in classes.items():
        failure = platform_failure(cls("it broke", pipeline_id="orders"), pipeline_id="orders")
        assert failure.allow_retries is (name in RETRYABLE), name
        assert failure.metadata["incident_code"].value == cls.incident_code
        assert failure.metadata["pipeline_id"].value == "orders"
        assert "What to do:" in str(failure.description)
        assert name in cdf_platform.__all__, name


def test_silver_steps_retry_under_the_policy() -> None:
    spec = PipelineSpec(id="orders", source="/b", target="/s", keys=["order_id"])
    node = silver_asset(spec).node_def
    assert node.retry_policy == STEP_RETRY_POLICY
    assert STEP_RETRY_POLICY.max_retries == 2


def test_a_run_waits_a_bounded_while_for_an_engine_that_does_not_answer_and_says_so() -> None:
    remote = f"sc://127.0.0.1:{free_port()}"  # nothing listens there
    spark = SparkResource(remote=remote, engine_wait_seconds=3)
    said: list[str] = []
    spark._log = _Log(said)
    started = time.monotonic()
    with pytest.raises(EngineUnavailable) as raised:
        spark.spark_session  # noqa: B018 (the property connects)
    waited = time.monotonic() - started
    assert 3 <= waited < 10
    message = str(raised.value)
    assert f"the engine at {remote} has been unreachable since" in message, message
    assert "the run waited 3 s for it" in message, message
    assert "What to do: start the engine" in message and ".." not in message, message
    assert said[0].startswith(f"engine unreachable at {remote} since"), said
    assert "waits up to 3 s" in said[0], said
    assert not spark.started


class _Log:
    """The run's log as the resource uses it (warnings), kept in a list."""

    def __init__(self, said: list[str]) -> None:
        self.said = said

    def warning(self, message: str) -> None:
        self.said.append(message)
