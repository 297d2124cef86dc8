"""Platform errors at the Dagster boundary, mapped once: a step that fails on a
`CdfPlatformError` raises `platform_failure(err)`, which carries the error's incident code (the
operator's filter, beside the step's other facts) and lets Dagster retry the step only for a
retryable class (`CdfPlatformError.retryable`: a concurrent write, an unreachable store). Every
other class would fail the same way until what its message names is fixed, so retrying it only
delays the alert.

Silver steps retry under `STEP_RETRY_POLICY`; a consumer asset of the watermark IO manager gets
the same treatment under its own `retry_policy`. A run whose step still fails on a retryable
class once its step retries are spent is marked for Dagster's run retries
(`mark_retryable_run`), which a deployment keeps for runs whose process died otherwise
(`retry_on_asset_or_op_failure: false`): an engine restarted under load costs retries, never a
pipeline stuck until bronze's next commit.
"""

from typing import TYPE_CHECKING, Any

import dagster as dg

from cdf_platform.core.errors import CdfPlatformError, EngineUnavailable

if TYPE_CHECKING:
    from cdf_platform.orchestration.shared.spark_resource import SparkResource

# The run tag Dagster's run retries read to re-execute a run that failed in a step
# (`dagster._core.storage.tags.RETRY_ON_ASSET_OR_OP_FAILURE_TAG`); it wins over the instance's
# `run_retries: retry_on_asset_or_op_failure`.
RETRY_ON_STEP_FAILURE_TAG = "dagster/retry_on_asset_or_op_failure"

# A retryable failure of a silver step: twice more, 15 s then 30 s later (a concurrent commit
# settles, an object store comes back); a classified failure that is not retryable is never
# retried.
STEP_RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=15, backoff=dg.Backoff.EXPONENTIAL)


def platform_failure(err: CdfPlatformError, **metadata: Any) -> dg.Failure:
    """The step failure for `err`: its message, its incident code and `metadata` on the step,
    retries allowed only for a retryable class."""
    return dg.Failure(
        str(err),
        metadata={"incident_code": err.incident_code, **metadata},
        allow_retries=err.retryable,
    )


def mark_retryable_run(
    context: dg.InputContext | dg.OutputContext,
    err: CdfPlatformError,
    spark: "SparkResource | None" = None,
) -> None:
    """What a step that failed on `err` leaves for its retries: a Spark Connect session whose
    server went away is dropped (the retry connects again, waiting for the engine while it is
    away) and the message names the engine's address, and a retryable failure marks the run
    for Dagster's run retries (`RETRY_ON_STEP_FAILURE_TAG`), read when the run fails."""
    if isinstance(err, EngineUnavailable) and spark is not None:
        spark.discard_session()
        if spark.remote:
            err.at_engine(spark.remote)
    if err.retryable:
        step = context.step_context
        step.instance.add_run_tags(step.run_id, {RETRY_ON_STEP_FAILURE_TAG: "true"})
