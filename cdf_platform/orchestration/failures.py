"""Platform errors at the Dagster boundary, mapped once: a step that fails on a
`CdfPlatformError` raises `platform_failure(err)`, which carries the error's incident code (the
operator's filter, beside the step's other facts) and lets Dagster retry the step only for a
retryable class (`CdfPlatformError.retryable`: a concurrent write, an unreachable store). Every
other class would fail the same way until what its message names is fixed, so retrying it only
delays the alert.

Silver steps retry under `STEP_RETRY_POLICY`; a consumer asset of the watermark IO manager gets
the same treatment under its own `retry_policy`.
"""

from typing import Any

import dagster as dg

from cdf_platform.core.errors import CdfPlatformError

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
