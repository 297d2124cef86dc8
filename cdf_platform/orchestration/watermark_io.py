"""The watermark IO manager: pins a silver asset's change set before the asset runs, and records
what the run did on its materialization.

Loading the bronze input reads only logs (bronze's replay window, silver's watermark), so a run
that finds nothing to do never starts Spark. The silver asset carries the pinned plan out with
`execute_plan` and returns the engine's `RunResult`; `handle_output` turns it into the
materialization's metadata. The data itself never passes through Dagster: silver is a Delta table
written by the MERGE that also stamps the watermark (DESIGN.md section 3).
"""

import time
from dataclasses import dataclass

import dagster as dg

from cdf_platform.orchestration.lake_resource import ControlTableResource
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.planning.run_result import RunResult
from cdf_platform.runner import plan_pipeline

# AssetIn metadata naming the pipeline whose change set an input stands for: one bronze table can
# feed several pipelines, so the bronze asset key alone does not say which watermark to use.
PIPELINE_ID_METADATA = "cdf_platform/pipeline_id"


@dataclass(frozen=True)
class PinnedChangeSet:
    """The change set a silver run applies: the engine's JVM-free plan (bronze range
    `(watermark, end_version]`, or the snapshot version of a rebuild) and how long planning took.

    Attributes:
        plan: mode, pinned versions and any classified problem (lost window, source reset).
        plan_seconds: wall time of planning, reported in the run's timings.
    """

    plan: RunPlan
    plan_seconds: float

    @property
    def pipeline_id(self) -> str:
        """The pipeline this change set belongs to."""
        return self.plan.spec.id

    def describe(self) -> str:
        """One line for the run log."""
        plan = self.plan
        problem = f"; problem: {plan.problem.incident_code}" if plan.problem else ""
        if plan.mode is RunMode.INCREMENTAL:
            what = f"bronze versions ({plan.watermark}, {plan.end_version}]"
        elif plan.mode is RunMode.NOOP:
            what = f"nothing after watermark {plan.watermark}"
        else:
            what = f"bronze snapshot at version {plan.end_version}"
        return f"{self.pipeline_id}: {plan.mode.value}, {what}{problem}"


def _metadata_value(value: object) -> dg.MetadataValue:
    if value is None:
        return dg.MetadataValue.null()
    if isinstance(value, bool):
        return dg.MetadataValue.bool(value)
    if isinstance(value, int):
        return dg.MetadataValue.int(value)
    if isinstance(value, float):
        return dg.MetadataValue.float(value)
    return dg.MetadataValue.text(str(value))


def run_result_metadata(result: RunResult) -> dict[str, dg.MetadataValue]:
    """Typed Dagster metadata of one pipeline run: mode, start/end version, rows inserted /
    updated / deleted, lag before and after, duration, whether Spark started, the incident.

    Numbers stay numbers (so the UI plots them); a figure the run does not have (the range of a
    no-op, the incident of a clean run) is recorded as null.
    """
    metadata = {name: _metadata_value(value) for name, value in result.as_metadata().items()}
    if result.incident_message:
        metadata["incident_message"] = dg.MetadataValue.text(result.incident_message)
    return metadata


class WatermarkIOManager(dg.ConfigurableIOManager):
    """Loads a silver asset's pinned change set and records the outcome of applying it.

    The silver asset declares its bronze table as an input managed by this IO manager, with
    `PIPELINE_ID_METADATA` naming the pipeline; its output is the engine's `RunResult`.

    Example:
        >>> io_manager = WatermarkIOManager(control_table=ControlTableResource())
        >>> # @dg.asset(ins={"changes": dg.AssetIn(key=["bronze", "orders"],
        >>> #     input_manager_key="watermark_io_manager",
        >>> #     metadata={PIPELINE_ID_METADATA: "orders"})},
        >>> #     io_manager_key="watermark_io_manager")
    """

    control_table: dg.ResourceDependency[ControlTableResource]

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def load_input(self, context: dg.InputContext) -> PinnedChangeSet:
        """Pin `(watermark, latest]` of the input's pipeline from the logs alone (no Spark).

        Raises:
            dg.Failure: the input does not name its pipeline.
            CdfPlatformError: the pipeline is unknown, or bronze is missing / owned by another
                pipeline (SourceNotFound, TargetOwnershipConflict).
        """
        pipeline_id = context.definition_metadata.get(PIPELINE_ID_METADATA)
        if not isinstance(pipeline_id, str):
            raise dg.Failure(
                f"input {context.name!r} has no {PIPELINE_ID_METADATA!r} metadata; declare it "
                "with dg.AssetIn(metadata={...}) so the watermark IO manager knows the pipeline"
            )
        spec = self.control_table.spec(pipeline_id)
        started = time.monotonic()
        plan = plan_pipeline(spec, self.control_table.control())
        changes = PinnedChangeSet(plan=plan, plan_seconds=time.monotonic() - started)
        context.log.info("pinned change set: %s", changes.describe())
        return changes

    def handle_output(self, context: dg.OutputContext, obj: RunResult) -> None:
        """Record `obj` (what the silver run did) as the materialization's metadata."""
        metadata = run_result_metadata(obj)
        metadata["path"] = dg.MetadataValue.path(self.control_table.spec(obj.pipeline_id).target)
        context.add_output_metadata(metadata)
        context.log.info(
            "%s: %s, watermark %s -> %s, +%d ~%d -%d rows in %.1f s (spark started: %s)",
            obj.pipeline_id,
            obj.mode.value,
            obj.watermark_before,
            obj.watermark_after,
            obj.rows_inserted,
            obj.rows_updated,
            obj.rows_deleted,
            obj.duration_seconds,
            obj.spark_started,
        )
