"""The `consumer_lag` check: how far silver is behind its bronze table.

Lag runs from the first bronze commit silver has not applied (DESIGN.md section 4): versions
L - W, the data-changing ones among them, and hours since commit W + 1. Fails with severity
ERROR above the pipeline's `max_allowed_lag_hours`. Reads logs only: never starts Spark.
"""

import dagster as dg

from cdf_platform.core.spec import PipelineSpec
from cdf_platform.orchestration.figures import count, hours, text
from cdf_platform.orchestration.lake_resource import ControlTableResource
from cdf_platform.orchestration.silver import silver_key
from cdf_platform.planning.status import PipelineStatus, WindowState, pipeline_status

CONSUMER_LAG = "consumer_lag"


def consumer_lag_result(spec: PipelineSpec, status: PipelineStatus) -> dg.AssetCheckResult:
    """The check result for `status`, with numeric lag figures (see `checks.figures`)."""
    metadata: dict[str, dg.MetadataValue] = {
        "version_lag": count(status.version_lag),
        "data_version_lag": count(status.data_version_lag),
        "lag_hours": hours(status.lag_hours),
        "watermark": count(status.watermark),
        "latest_version": count(status.latest_version),
        "max_allowed_lag_hours": hours(spec.max_allowed_lag_hours),
        "state": text(status.state.value),
    }
    if status.state is WindowState.SOURCE_MISSING:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            description=f"bronze is missing, lag unknown: {status.problem}",
            metadata=metadata,
        )
    if status.lag_exceeded:
        return dg.AssetCheckResult(
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=(
                f"silver is {status.lag_hours:.1f} h behind bronze (allowed: "
                f"{spec.max_allowed_lag_hours:g} h): {status.version_lag} versions, "
                f"{status.data_version_lag} with data, after watermark {status.watermark}"
            ),
            metadata=metadata,
        )
    return dg.AssetCheckResult(
        passed=True,
        description=f"{status.version_lag} versions ({status.lag_hours or 0:.1f} h) behind",
        metadata=metadata,
    )


def consumer_lag_check(spec: PipelineSpec) -> dg.AssetChecksDefinition:
    """The `consumer_lag` check of `spec`'s silver asset."""

    @dg.asset_check(
        asset=silver_key(spec.id),
        name=CONSUMER_LAG,
        description=(
            "How far silver is behind bronze, counted from the first unapplied bronze commit: "
            f"fails above {spec.max_allowed_lag_hours:g} hours."
        ),
    )
    def _consumer_lag(control_table: ControlTableResource) -> dg.AssetCheckResult:
        resolved = control_table.spec(spec.id)
        return consumer_lag_result(resolved, pipeline_status(resolved))

    return _consumer_lag
