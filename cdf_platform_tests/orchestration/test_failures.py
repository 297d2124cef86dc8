"""Platform errors at the Dagster boundary: every step failure carries its incident code, and
only a retryable class (a concurrent write, an unreachable store) lets Dagster retry the step;
silver steps retry under a policy for those. Every error class is classified one way or the
other, and the public API exports each."""

from __future__ import annotations

import inspect

import cdf_platform
from cdf_platform.core import errors
from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.core.spec import PipelineSpec
from cdf_platform.orchestration.failures import STEP_RETRY_POLICY, platform_failure
from cdf_platform.orchestration.silver import silver_asset

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
