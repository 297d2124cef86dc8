"""Silver assets: one per PipelineSpec, each kept in step with its bronze table by the engine.

A silver materialization is one pipeline run: the watermark IO manager pins the change set from
the logs, the asset applies it (incremental MERGE, snapshot rebuild, or nothing at all), and the
IO manager records the outcome as metadata.
"""

import dagster as dg
from pydantic import Field

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.core.spec import DeleteMode, FallbackMode, PipelineSpec
from cdf_platform.demo.bronze_assets import BRONZE_PREFIX
from cdf_platform.orchestration.lake_resource import ControlTableResource
from cdf_platform.orchestration.spark_resource import SparkResource
from cdf_platform.orchestration.watermark_io import PIPELINE_ID_METADATA, PinnedChangeSet
from cdf_platform.planning.run_result import RunResult
from cdf_platform.runner import execute_plan

SILVER_PREFIX = "silver"
WATERMARK_IO_MANAGER_KEY = "watermark_io_manager"
# Run tag naming the pipeline of a run (sensors set it; handy for filtering runs in the UI).
PIPELINE_TAG = "cdf_platform/pipeline_id"


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


def bronze_key(spec: PipelineSpec) -> dg.AssetKey:
    """The bronze asset `spec` reads: `bronze/<bronze_name>`."""
    return dg.AssetKey([BRONZE_PREFIX, spec.bronze_name])


def silver_key(pipeline_id: str) -> dg.AssetKey:
    """The silver asset of a pipeline: `silver/<pipeline_id>`."""
    return dg.AssetKey([SILVER_PREFIX, pipeline_id])


def silver_op_name(pipeline_id: str) -> str:
    """The op name of a silver asset (the key of its config in run config)."""
    return silver_key(pipeline_id).to_python_identifier()


def pipeline_pool(pipeline_id: str) -> str:
    """The Dagster pool of a pipeline's silver asset.

    Every run that writes a pipeline's silver table (incremental or rebuild) holds this pool, so
    with a limit of 1 at run granularity at most one such run is in progress. In the instance's
    dagster.yaml:

        concurrency:
          pools:
            granularity: run   # the limit counts runs holding the pool, not ops
            default_limit: 1   # every cdf_pipeline_* pool without an explicit limit

    or per pool: `dagster instance concurrency set cdf_pipeline_orders 1`.
    """
    return f"cdf_pipeline_{pipeline_id}"


def _description(spec: PipelineSpec) -> str:
    deletes = (
        "deleted rows are removed"
        if spec.delete_mode is DeleteMode.HARD
        else "deleted rows stay, flagged `_is_deleted` with `_deleted_at`"
    )
    return (
        f"`{spec.bronze_name}` as the business sees it now: one row per "
        f"{', '.join(spec.keys)}, the latest version of each, kept in step with "
        f"`bronze/{spec.bronze_name}` through its change feed ({deletes}). Each row carries the "
        "bronze `_source_commit_version` that produced it; the table's change feed is on, so "
        "gold consumers read it incrementally. The watermark (last bronze version applied) "
        "lives in this table's own Delta log."
    )


def silver_asset(spec: PipelineSpec) -> dg.AssetsDefinition:
    """The silver asset of `spec`: key `silver/<id>`, depending on `bronze/<bronze_name>`."""

    @dg.asset(
        key=silver_key(spec.id),
        ins={
            "changes": dg.AssetIn(
                key=bronze_key(spec),
                input_manager_key=WATERMARK_IO_MANAGER_KEY,
                metadata={PIPELINE_ID_METADATA: spec.id},
            )
        },
        io_manager_key=WATERMARK_IO_MANAGER_KEY,
        group_name=SILVER_PREFIX,
        kinds={"spark", "delta"},
        pool=pipeline_pool(spec.id),
        description=_description(spec),
        metadata={
            "pipeline_id": spec.id,
            "keys": ", ".join(spec.keys),
            "delete_mode": spec.delete_mode.value,
            "fallback_mode": spec.fallback_mode.value,
            "max_allowed_lag_hours": spec.max_allowed_lag_hours,
            "min_headroom_hours": spec.min_headroom_hours,
        },
    )
    def _silver(
        config: SilverRunConfig,
        changes: PinnedChangeSet,
        spark: SparkResource,
        control_table: ControlTableResource,
    ) -> RunResult:
        plan = changes.plan
        if (
            config.force_rebuild
            and plan.spec.fallback_mode is FallbackMode.FAIL_FAST
            and not config.override_fail_fast
        ):
            raise dg.Failure(
                f"pipeline {spec.id} is FAIL_FAST: a rebuild needs a person's decision. Read the "
                "incident in the load log, then rerun with `override_fail_fast: true`.",
                metadata={"pipeline_id": spec.id, "fallback_mode": FallbackMode.FAIL_FAST.value},
                allow_retries=False,
            )
        try:
            return execute_plan(
                plan,
                spark_factory=lambda: spark.spark_session,
                control=control_table.control(),
                force_rebuild=config.force_rebuild,
                plan_seconds=changes.plan_seconds,
            )
        except CdfPlatformError as err:
            # The classified failure, with the facts an operator filters on, on the failed step.
            raise dg.Failure(
                str(err),
                metadata={
                    "pipeline_id": spec.id,
                    "incident_code": err.incident_code,
                    "version": dg.MetadataValue.int(err.version)
                    if err.version is not None
                    else dg.MetadataValue.null(),
                },
                allow_retries=False,
            ) from err

    return _silver


def silver_assets(specs: list[PipelineSpec]) -> list[dg.AssetsDefinition]:
    """One silver asset per spec."""
    return [silver_asset(spec) for spec in specs]
