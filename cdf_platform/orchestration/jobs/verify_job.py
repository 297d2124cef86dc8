"""`verify_job` and `verify_schedule`: silver compared with its spec applied to bronze
(`cdf_platform.run.verify.verify_pipeline`, the one the command line's `verify` calls), weekly.

One op per pipeline (`verify_<id>`), holding the pipeline's pool like every run that may write
its silver: a repair never races an incremental run. A pipeline whose spec says `verify: false`
is skipped unless its op's config says `include: true`; `verify_repair: auto` repairs what the
verification finds (the op's `repair` overrides it). What each verification found is its op's
output metadata and an observation on the silver asset (differing keys counted and named); a
silver left differing fails its op, so the run shows it; a pipeline with nothing to compare
yet (never run, a spec edit not taken) is skipped with the reason.
"""

import json

import dagster as dg
from pydantic import Field

from cdf_platform.core.errors import CdfPlatformError, VerificationRefused
from cdf_platform.core.spec.modes import VerifyRepair
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.shared.keys import (
    QUEUE_TAG,
    SILVER_QUEUE,
    pipeline_pool,
    silver_key,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.orchestration.shared.step_failures import platform_failure
from cdf_platform.run.verify import VerifyResult, verify_pipeline

VERIFY_JOB = "verify_job"
VERIFY_SCHEDULE = "verify_schedule"


class VerifyConfig(dg.Config):
    """How one pipeline's verification runs."""

    include: bool | None = Field(
        default=None,
        description="Verify this pipeline (default: as its spec's `verify` says).",
    )
    repair: bool | None = Field(
        default=None,
        description="Repair a difference (default: as its spec's `verify_repair` says).",
    )
    bronze_version: int | None = Field(
        default=None,
        description="Compare with bronze at this version (default: silver's watermark).",
    )


def verify_op_name(pipeline_id: str) -> str:
    """`verify_<pipeline id>`: the op (and its run config key) of one pipeline."""
    return f"verify_{pipeline_id}"


def _metadata(result: VerifyResult) -> "dict[str, dg.RawMetadataValue]":
    figures = result.as_metadata()
    metadata: dict[str, dg.RawMetadataValue] = {
        key: value
        for key, value in figures.items()
        if isinstance(value, int | float | str) and key != "pipeline_id"
    }
    metadata["sample_keys"] = dg.MetadataValue.json(
        json.loads(json.dumps(figures["sample_keys"], default=str))
    )
    return metadata


def _verify_op(spec: PipelineSpec) -> dg.OpDefinition:
    @dg.op(name=verify_op_name(spec.id), tags={"kind": "delta"}, pool=pipeline_pool(spec.id))
    def verify(
        context: dg.OpExecutionContext, config: VerifyConfig, spark: SparkResource, lake: LakeLayout
    ) -> dg.Output[None]:
        if not (spec.verify if config.include is None else config.include):
            context.log.info("%s: left out (its spec says verify: false)", spec.id)
            return dg.Output(None, metadata={"outcome": "SKIPPED"})
        control = lake.control()
        repair = config.repair
        if repair is None:
            repair = spec.verify_repair is VerifyRepair.AUTO
        try:
            result = verify_pipeline(
                spec,
                control,
                lambda: spark.session_on(control.storage),
                bronze_version=config.bronze_version,
                repair=repair,
                run_id=context.run_id,
            )
        except VerificationRefused as err:
            context.log.warning("%s", err)
            return dg.Output(None, metadata={"outcome": "SKIPPED", "reason": str(err)})
        except CdfPlatformError as err:
            raise platform_failure(err) from err
        metadata = _metadata(result)
        context.log_event(dg.AssetObservation(asset_key=silver_key(spec.id), metadata=metadata))
        outcome = result.verification.outcome.value
        context.log.info("%s: %s", spec.id, outcome)
        if outcome == "DIFFERENT":
            raise dg.Failure(
                f"{spec.id}: silver differs from its spec applied to bronze at version "
                f"{result.verification.bronze_version} in {result.verification.differing_keys} "
                f"key(s). What to do: look at the keys named, then `cdf-platform verify "
                f"--pipeline {spec.id} --repair` (or set verify_repair: auto)",
                metadata=metadata,
            )
        return dg.Output(None, metadata=metadata)

    return verify


def build_verify_job(specs: list[PipelineSpec]) -> dg.JobDefinition:
    """`verify_job`: a verification op per pipeline of `specs` (module doc)."""
    ops = [_verify_op(spec) for spec in specs]

    @dg.job(
        name=VERIFY_JOB,
        tags={QUEUE_TAG: SILVER_QUEUE},
        description="Compare each silver with its spec applied to bronze (by key buckets of "
        "hashes; nothing written when equal), name the differing keys, repair where asked.",
    )
    def verify_job() -> None:
        for op in ops:
            op()

    return verify_job


def build_verify_schedule(job: dg.JobDefinition, *, running: bool = True) -> dg.ScheduleDefinition:
    """`verify_schedule`: `job` weekly (Sunday 04:00), RUNNING unless `running` is False."""
    return dg.ScheduleDefinition(
        name=VERIFY_SCHEDULE,
        job=job,
        cron_schedule="0 4 * * 0",
        description="Verify every silver (whose spec does not opt out) once a week.",
        default_status=dg.DefaultScheduleStatus.RUNNING
        if running
        else dg.DefaultScheduleStatus.STOPPED,
    )
