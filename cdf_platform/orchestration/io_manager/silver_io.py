"""A pipeline's silver asset through the watermark IO manager: its input side is the pinned
run plan, its output side is the run.

The silver asset takes bronze as an input loaded by `WatermarkIOManager`; the input carries the
pipeline's spec (`pipeline_input`), which tells the IO manager that the consumer is a
pipeline's silver. For it, `load_pipeline_batch` does not read bronze: it plans the run from the
logs exactly as `cdf-platform run` does (`cdf_platform.run.PipelineRunner.prepare`: the
catalog located first when the pipeline names tables, then the JVM-free plan) and hands the
asset a `PipelineBatch` holding the pinned `RunPlan`. Its watermark is silver's own, in silver's
log and the control table (docs/design.md section 3), not a consumer's marks. The asset returns
a `PipelineWrite` (what its run config asks), which `write_pipeline` carries out
(`PipelineRunner.finish`, the Dagster run its `RunEntry`: the requested rebuild's policy and an
override's audit record, then no-op, incremental MERGE, initial load or rebuild, each stamping
the watermark in silver's commit) and reports as the materialization's metadata.

A no-op plan never starts Spark, on either side. Failures are classified on both sides (by
`PipelineRunner`) and fail the step as a `dg.Failure` with the pipeline and incident code.

Where the run's seconds went is part of the metadata (`stage_<stage>_seconds`): when Dagster
created, dequeued and launched the run (its run record and its `RUN_STARTING` and `RUN_START`
events, read at the run's first silver step and kept by the watermark IO manager for the
run's later ones) are handed to the run as plain times (`OrchestratorTimes`), which adds them
to its load-log row and its stages (`cdf_platform.state.load_log`).

Example:
    >>> @dg.asset(ins={"bronze": pipeline_input(spec)})  # doctest: +SKIP
    ... def orders(bronze: PipelineBatch) -> PipelineWrite:
    ...     return PipelineWrite(bronze.prepared)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime

import dagster as dg

from cdf_platform.core.errors import CdfPlatformError, RebuildNeedsOverride
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.shared.destructive import PERMITTED_BY
from cdf_platform.orchestration.shared.figures import duration, text
from cdf_platform.orchestration.shared.keys import (
    WATERMARK_IO_MANAGER_KEY,
    bronze_key,
    silver_key,
    silver_pipeline_ids,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.orchestration.shared.step_failures import mark_retryable_run, platform_failure
from cdf_platform.planning.plan import RunPlan
from cdf_platform.planning.run_result import RunResult
from cdf_platform.run import OrchestratorTimes, PipelineRunner, PreparedRun, RunEntry

PIPELINE_SPEC = "cdf_platform/pipeline_spec"
"""The input metadata entry holding the pipeline's spec (JSON): it marks a pipeline's silver."""


@dataclass(frozen=True)
class PipelineBatch:
    """What a pipeline's silver asset loads from bronze: the run, planned and pinned.

    Attributes:
        prepared: The pinned plan with the spec as declared and the planning time.
    """

    prepared: PreparedRun

    @property
    def plan(self) -> RunPlan:
        """The pinned plan: mode, bronze range or snapshot version, silver's watermark."""
        return self.prepared.plan


@dataclass(frozen=True)
class PipelineWrite:
    """What a pipeline's silver asset returns: carry out its pinned run.

    Attributes:
        prepared: The run `PipelineBatch` handed the asset.
        force_rebuild: Reconcile from the snapshot at the pinned version whatever the plan
            (as the runner decides: `cdf_platform.run.rebuild_policy`).
        repair_of: The watermark of the loss the rebuild was asked to repair, if any.
        override_fail_fast: The run config asks to rebuild a FAIL_FAST pipeline without its
            review, and the deployment permits it (the asset refused it otherwise).
    """

    prepared: PreparedRun
    force_rebuild: bool = False
    repair_of: int | None = None
    override_fail_fast: bool = False


def pipeline_input(spec: PipelineSpec) -> dg.AssetIn:
    """Silver's input on `spec`'s bronze, loaded by the watermark IO manager as the pinned run
    (whatever IO manager the bronze asset names: the demo's writers keep Dagster's default)."""
    return dg.AssetIn(
        key=bronze_key(spec),
        input_manager_key=WATERMARK_IO_MANAGER_KEY,
        metadata={PIPELINE_SPEC: spec.model_dump(mode="json")},
    )


def pipeline_spec_of(context: dg.InputContext) -> PipelineSpec | None:
    """The spec of the pipeline whose silver loads this input; None for any other consumer."""
    declared = (context.definition_metadata or {}).get(PIPELINE_SPEC)
    if declared is None:
        return None
    return PipelineSpec.model_validate(getattr(declared, "value", declared))


def pipeline_failure(spec: PipelineSpec, err: CdfPlatformError) -> dg.Failure:
    """The classified failure, with the facts an operator filters on, on the failed step (a
    refused rebuild names the fallback mode that refused it)."""
    refused = (
        {"fallback_mode": spec.fallback_mode.value} if isinstance(err, RebuildNeedsOverride) else {}
    )
    return platform_failure(
        err, pipeline_id=spec.id, version=_metadata_value(err.version), **refused
    )


def _rerun(spec: PipelineSpec) -> str:
    return f"the materialization of {silver_key(spec.id).to_user_string()}"


def _runner(spark: SparkResource, lake: LakeLayout) -> PipelineRunner:
    control = lake.control()
    return PipelineRunner(
        control,
        lambda short: spark.session_for_run(short=short, storage=control.storage),
        rerun=_rerun,
    )


def _entry(context: dg.OutputContext, write: PipelineWrite) -> RunEntry:
    """The Dagster run as the entry of its silver run: its id, job and tags for an override's
    audit record, and the override its config asks for (the asset refused one the deployment
    does not permit)."""
    run = context.step_context.dagster_run
    return RunEntry(
        job=run.job_name,
        run_id=run.run_id,
        tags=dict(run.tags),
        override=PERMITTED_BY if write.override_fail_fast else None,
    )


def load_pipeline_batch(
    context: dg.InputContext, spec: PipelineSpec, spark: SparkResource, lake: LakeLayout
) -> PipelineBatch:
    """Plan the next run of `spec` and pin it (no bronze row is read; a pipeline of paths
    plans without a JVM).

    Raises:
        dg.Failure: the classified problem a person must fix (bronze missing, ...).
    """
    try:
        prepared = _runner(spark, lake).prepare(spec)
    except CdfPlatformError as err:
        mark_retryable_run(context, err, spark)
        raise pipeline_failure(spec, err) from err
    # The asset's one line on the plan says how long planning took: each line of a run's log
    # is an event stored in the instance (a shared run's steps write a thousand).
    return PipelineBatch(prepared)


def write_pipeline(
    context: dg.OutputContext,
    write: PipelineWrite,
    spark: SparkResource,
    lake: LakeLayout,
    orchestrator: OrchestratorTimes,
) -> RunResult:
    """Carry out the pinned run and record what it did as the materialization's metadata;
    `orchestrator`: when Dagster created, dequeued and launched the run (`orchestrator_times`).

    Raises:
        dg.Failure: the classified failure (FAIL_FAST, bad input, a read or write failure).
    """
    spec = write.prepared.spec
    # A run writing several silver tables (pipelines sharing a run) keeps its driver JVM for
    # all of them: it starts lean only for a lone short run.
    selection = context.step_context.dagster_run.asset_selection or ()
    shared = len(silver_pipeline_ids(selection)) > 1
    try:
        # An unexpected failure is classified too: the step fails as a platform error naming
        # the pipeline and what to do, the original chained below it.
        runner = replace(_runner(spark, lake), entry=_entry(context, write), log=context.log)
        result = runner.finish(
            write.prepared,
            force_rebuild=write.force_rebuild,
            repair_of=write.repair_of,
            shares_jvm=shared,
            orchestrator=orchestrator,
        )
    except CdfPlatformError as err:
        mark_retryable_run(context, err, spark)
        raise pipeline_failure(spec, err) from err
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
    metadata["dagster_run_id"] = dg.MetadataValue.text(context.run_id)
    if result.overridden_by is not None:
        metadata["override_fail_fast"] = dg.MetadataValue.bool(True)
        metadata["permitted_by"] = dg.MetadataValue.text(result.overridden_by)
    if "target" in spec.table_names:
        metadata["table_name"] = dg.MetadataValue.text(spec.target)
    else:
        metadata["path"] = dg.MetadataValue.path(spec.target)
    context.add_output_metadata(metadata)
    return result


# Dagster 1.13 writes no RUN_DEQUEUED (the type exists, unused): the queued run coordinator's
# daemon reports RUN_STARTING as it takes a run off the queue and hands it to the launcher.
_DEQUEUED, _LAUNCHED = dg.DagsterEventType.RUN_STARTING, dg.DagsterEventType.RUN_START


def orchestrator_times(instance: dg.DagsterInstance, run_id: str) -> OrchestratorTimes:
    """When Dagster created run `run_id`, handed it to its launcher (off the queue: its
    `RUN_STARTING`; None for a run executed in process) and started its process (`RUN_START`):
    its run record and those two events of its log, two reads. The watermark IO manager reads
    them at the run's first silver step (its process has started by then: every mark is
    written) and keeps them for its later steps (a shared run's other pipelines)."""
    record = instance.get_run_record_by_id(run_id)
    events = instance.get_records_for_run(run_id, of_type={_DEQUEUED, _LAUNCHED}).records
    at = {
        event.event_log_entry.dagster_event_type: datetime.fromtimestamp(event.timestamp, UTC)
        for event in events
    }
    times = OrchestratorTimes(
        created_at=record.create_timestamp if record is not None else None,
        dequeued_at=at.get(_DEQUEUED),
        launched_at=at.get(_LAUNCHED),
    )
    return times


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
    updated / deleted, lag before and after, duration, whether Spark started, the incident,
    the seconds of its stages.

    Numbers stay numbers (so the UI plots them), hours and seconds rounded to 2 decimals; a
    figure the run does not have (the range of a no-op, the incident of a clean run) reads
    "none", since the UI shows a null value as "null".
    """
    metadata = {name: _metadata_value(value) for name, value in result.as_metadata().items()}
    if result.incident_message:
        metadata["incident_message"] = dg.MetadataValue.text(
            incident_summary(result.incident_message)
        )
    return metadata


# Where a platform error's text turns from the problem to its remedy (`CdfPlatformError`).
_REMEDY = ". What to do: "


def incident_summary(message: str) -> str:
    """The incident a run handled, for its metadata: the problem and what the run noted, without
    the remedy the run carried out (a rebuild's `What to do` is the rebuild itself). Dagster
    shows an IO manager's metadata on the materialization and on the handled output both, so
    it is kept to what a person needs beside the incident code; the load log keeps all of it.

    Example:
        >>> incident_summary(
        ...     "ReplayWindowLost [pipeline=p]: versions 4..5 left the window. What to do: "
        ...     "run `cdf-platform rebuild p`.; history kept from version 6"
        ... )
        'ReplayWindowLost [pipeline=p]: versions 4..5 left the window; history kept from version 6'
    """
    text = message
    if _REMEDY not in text:
        return text
    problem, rest = text.split(_REMEDY, 1)
    _, _, notes = rest.partition(".; ")
    return "; ".join(filter(None, (problem, notes)))
