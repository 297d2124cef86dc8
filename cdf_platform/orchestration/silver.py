"""Silver assets: one per PipelineSpec, each kept in step with its bronze table by the engine.

A silver materialization is one pipeline run. The asset body plans from the logs alone (bronze's
replay window, silver's watermark: a run that finds nothing to do never starts Spark), carries
the plan out (incremental MERGE, snapshot rebuild, or nothing at all) and returns what the run
did as the materialization's metadata. The data never passes through Dagster: silver is a Delta
table written by the MERGE that also stamps the watermark (docs/design.md section 3), so no IO
manager is involved.
"""

from datetime import timedelta

import dagster as dg
from pydantic import Field

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.core.spec import DeleteMode, FallbackMode, HistoryMode, PipelineSpec
from cdf_platform.orchestration.figures import duration, text
from cdf_platform.orchestration.keys import (
    SILVER_PREFIX,
    WATERMARK_IO_MANAGER_KEY,
    bronze_key,
    pipeline_pool,
    silver_key,
)
from cdf_platform.orchestration.resources import LakeLayout, SparkResource
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.planning.run_result import RunResult
from cdf_platform.runner import run_pipeline
from cdf_platform.spark.failures import classified_run


class SilverRunConfig(dg.Config):
    """How one silver run behaves beyond its pipeline's policy."""

    force_rebuild: bool = Field(
        default=False,
        description="Reconcile silver from the bronze snapshot at the pinned latest version, "
        "whatever the watermark (the rebuild job and the rebuild sensor set this).",
    )
    override_fail_fast: bool = Field(
        default=False,
        description="Allow `force_rebuild` on a FAIL_FAST pipeline: a person has looked at the "
        "incident and accepts a rebuild.",
    )


def describe_plan(plan: RunPlan) -> str:
    """One line for the run log: the pinned change set a run applies."""
    problem = f"; problem: {plan.problem.incident_code}" if plan.problem else ""
    if plan.mode is RunMode.INCREMENTAL:
        what = f"bronze versions ({plan.watermark}, {plan.end_version}]"
    elif plan.mode is RunMode.NOOP:
        what = f"nothing after watermark {plan.watermark}"
    else:
        what = f"bronze snapshot at version {plan.end_version}"
    return f"{plan.spec.id}: {plan.mode.value}, {what}{problem}"


def _metadata_value(value: object) -> dg.MetadataValue:
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(duration(value))
    return text(value)


def run_result_metadata(result: RunResult) -> dict[str, dg.MetadataValue]:
    """Typed Dagster metadata of one pipeline run: mode, start/end version, rows inserted /
    updated / deleted, lag before and after, duration, whether Spark started, the incident.

    Numbers stay numbers (so the UI plots them), hours and seconds rounded to 2 decimals; a
    figure the run does not have (the range of a no-op, the incident of a clean run) reads
    "none", since the UI shows a null value as "null".
    """
    metadata = {name: _metadata_value(value) for name, value in result.as_metadata().items()}
    if result.incident_message:
        metadata["incident_message"] = dg.MetadataValue.text(result.incident_message)
    return metadata


def _failure(spec: PipelineSpec, err: CdfPlatformError) -> dg.Failure:
    """The classified failure, with the facts an operator filters on, on the failed step."""
    return dg.Failure(
        str(err),
        metadata={
            "pipeline_id": spec.id,
            "incident_code": err.incident_code,
            "version": _metadata_value(err.version),
        },
        allow_retries=False,
    )


def _description(spec: PipelineSpec) -> str:
    deletes = (
        "deleted rows are removed"
        if spec.delete_mode is DeleteMode.HARD
        else "deleted rows stay, flagged `_is_deleted` with `_deleted_at`"
    )
    keys = ", ".join(spec.keys)
    if spec.history is HistoryMode.SCD2:
        clock = f"`{spec.sequence_by}` values" if spec.sequence_by else "bronze commit times"
        shape = (
            f"`{spec.bronze_name}` with its history: every version of each {keys}, dated by "
            f"`__start_at` and `__end_at` ({clock}; NULL on the current version; a delete "
            f"closes it), kept in step with `bronze/{spec.bronze_name}` through its change "
            "feed. Each version carries the bronze `_source_commit_version` that opened it"
        )
    else:
        shape = (
            f"`{spec.bronze_name}` as the business sees it now: one row per {keys}, the latest "
            f"version of each, kept in step with `bronze/{spec.bronze_name}` through its change "
            f"feed ({deletes}). Each row carries the bronze `_source_commit_version` that "
            "produced it"
        )
    return (
        f"{shape}; the table's change feed is on, so "
        "gold consumers read it incrementally. The watermark (last bronze version applied) "
        "lives in this table's own Delta log."
    )


def freshness_window(spec: PipelineSpec) -> timedelta:
    """`max_allowed_lag_hours` as the silver asset's freshness window (Dagster's floor: one
    minute)."""
    return max(timedelta(hours=spec.max_allowed_lag_hours), timedelta(minutes=1))


def silver_asset(spec: PipelineSpec) -> dg.AssetsDefinition:
    """The silver asset of `spec`: key `silver/<id>`, depending on `bronze/<bronze_name>`."""

    @dg.asset(
        key=silver_key(spec.id),
        deps=[bronze_key(spec)],
        group_name=SILVER_PREFIX,
        kinds={"spark", "delta"},
        pool=pipeline_pool(spec.id),
        # Silver writes itself (MaterializeResult); its consumers load its changes through the
        # watermark IO manager.
        io_manager_key=WATERMARK_IO_MANAGER_KEY,
        description=_description(spec),
        # Dagster's freshness (time since silver last materialized) with consumer_lag's limit;
        # the incremental sensor refreshes a caught-up silver asset (a JVM-free no-op run)
        # well inside the window, so the two agree while bronze is quiet too.
        freshness_policy=dg.FreshnessPolicy.time_window(fail_window=freshness_window(spec)),
        metadata={
            "pipeline_id": spec.id,
            "keys": ", ".join(spec.keys),
            "delete_mode": spec.delete_mode.value,
            "fallback_mode": spec.fallback_mode.value,
            "max_allowed_lag_hours": spec.max_allowed_lag_hours,
            "min_headroom_hours": spec.min_headroom_hours,
            # Where the watermark IO manager finds silver for its consumers.
            **(
                {"table_name": spec.target}
                if "target" in spec.table_names
                else {"path": dg.MetadataValue.path(spec.target)}
            ),
        },
    )
    def _silver(
        context: dg.AssetExecutionContext,
        config: SilverRunConfig,
        spark: SparkResource,
        lake: LakeLayout,
    ) -> dg.MaterializeResult:
        if (
            config.force_rebuild
            and spec.fallback_mode is FallbackMode.FAIL_FAST
            and not config.override_fail_fast
        ):
            raise dg.Failure(
                f"pipeline {spec.id} is FAIL_FAST: a rebuild needs a person's decision. Read the "
                "incident in the load log, then rerun with `override_fail_fast: true`.",
                metadata={"pipeline_id": spec.id, "fallback_mode": FallbackMode.FAIL_FAST.value},
                allow_retries=False,
            )
        control = lake.control()
        try:
            # An unexpected failure is classified too: the step fails as a platform error
            # naming the pipeline and what to do, the original chained below it.
            with classified_run(
                spec.id, rerun=f"the materialization of {context.asset_key.to_user_string()}"
            ):
                result = run_pipeline(
                    spec,
                    spark_factory=lambda: spark.spark_session,
                    control=control,
                    force_rebuild=config.force_rebuild,
                    on_plan=lambda plan: context.log.info(
                        "pinned change set: %s", describe_plan(plan)
                    ),
                )
        except CdfPlatformError as err:
            raise _failure(spec, err) from err
        context.log.info(
            "%s: %s, watermark %s -> %s, +%d ~%d -%d rows in %.1f s (spark started: %s)",
            spec.id,
            result.mode.value,
            result.watermark_before,
            result.watermark_after,
            result.rows_inserted,
            result.rows_updated,
            result.rows_deleted,
            result.duration_seconds,
            result.spark_started,
        )
        metadata = run_result_metadata(result)
        if "target" in spec.table_names:
            metadata["table_name"] = dg.MetadataValue.text(spec.target)
        else:
            metadata["path"] = dg.MetadataValue.path(spec.target)
        return dg.MaterializeResult(metadata=metadata)

    return _silver


def silver_assets(specs: list[PipelineSpec]) -> list[dg.AssetsDefinition]:
    """One silver asset per spec."""
    return [silver_asset(spec) for spec in specs]
