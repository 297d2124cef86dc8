"""Silver assets: one per PipelineSpec, each kept in step with its bronze table by the engine.

A silver materialization is one pipeline run, backed by the `spark` resource and the watermark
IO manager (`cdf_platform.orchestration.io_manager.silver_io`). Loading the asset's `bronze` input
plans the run from the logs alone (bronze's replay window, silver's watermark: a run that finds
nothing to do never starts Spark) and hands the asset the pinned plan, not bronze's rows. The
asset body applies this entry's rule (a run config's `override_fail_fast` needs the
deployment's permission) and returns a `PipelineWrite` with what its config asks; the IO
manager's output side carries it out through the runner, which decides what a requested
rebuild does (the FAIL_FAST refusal, a loss repaired already, the audit record of an override:
`cdf_platform.run.rebuild_policy`) as it does for `cdf-platform rebuild`, then writes silver and
its watermark in one commit (docs/design.md section 3) and records what the run did as the
materialization's metadata. `cdf-platform run` calls the same two halves without Dagster
(`cdf_platform.run`).
"""

import dagster as dg
from dagster._core.storage.tags import PRIORITY_TAG
from pydantic import Field

from cdf_platform.core.spec.modes import DeleteMode, HistoryMode
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import spec_fingerprint
from cdf_platform.orchestration.io_manager.silver_io import (
    PipelineBatch,
    PipelineWrite,
    pipeline_input,
)
from cdf_platform.orchestration.shared.destructive import refuse_unless_permitted
from cdf_platform.orchestration.shared.keys import (
    SILVER_PREFIX,
    WATERMARK_IO_MANAGER_KEY,
    pipeline_pool,
    silver_key,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.step_failures import STEP_RETRY_POLICY
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.run_requests import freshness_window
from cdf_platform.run.jvm_free.incremental_run import eligible_spec
from cdf_platform.run.rebuild_policy import OVERRIDE_ACTION

# A step's priority (Dagster's `dagster/priority` tag: an executor starts a run's runnable steps
# highest first). A pipeline whose runs deltalake can apply (`eligible_spec`) goes before the
# Spark ones in a shared run: its step takes hundredths of a second, theirs seconds, and its
# commits need not wait behind them.
JVM_FREE_PRIORITY = "1"


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
        "incident and accepts a rebuild. Skips a guard: refused unless the deployment permits "
        "it (CDF_ALLOW_DESTRUCTIVE=1).",
    )
    repair_of: int | None = Field(
        default=None,
        description="The watermark of the lost window this rebuild repairs (the rebuild sensor "
        "sets it): when silver's watermark has moved since and nothing is lost any more, an "
        "earlier run repaired the loss, and this run does what its plan says instead (no Spark "
        "when nothing is new), never a second repair.",
    )


# The config schema, inferred from the class once: inferring it for each of a fleet's silver
# assets (what a `config: SilverRunConfig` parameter does) is a third of loading 500 pipelines'
# definitions. Runs see the same fields, defaults and descriptions in the launchpad.
SILVER_CONFIG_SCHEMA = SilverRunConfig.to_config_schema().as_field()


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


def silver_asset(spec: PipelineSpec, *, allow_destructive: bool = False) -> dg.AssetsDefinition:
    """The silver asset of `spec`: key `silver/<id>`, depending on `bronze/<bronze_name>`;
    `override_fail_fast` refused unless `allow_destructive`
    (`cdf_platform.orchestration.shared.destructive`)."""

    @dg.asset(
        key=silver_key(spec.id),
        # Loaded by the watermark IO manager as the pinned run plan (no bronze row is read).
        ins={"bronze": pipeline_input(spec)},
        group_name=SILVER_PREFIX,
        kinds={"spark", "delta"},
        pool=pipeline_pool(spec.id),
        op_tags={PRIORITY_TAG: JVM_FREE_PRIORITY} if eligible_spec(spec) else None,
        # A retryable failure (a concurrent write, an unreachable store) is tried again.
        retry_policy=STEP_RETRY_POLICY,
        # The IO manager writes silver (the run's MERGE) and its consumers load silver's
        # changes through it.
        io_manager_key=WATERMARK_IO_MANAGER_KEY,
        config_schema=SILVER_CONFIG_SCHEMA,
        description=_description(spec),
        # The spec's fingerprint (docs/design.md section 3a): an edit of a row-shaping field
        # in the pipelines file marks silver and what reads it stale in the UI.
        code_version=spec_fingerprint(spec),
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
        context: dg.AssetExecutionContext, bronze: PipelineBatch, lake: LakeLayout
    ) -> PipelineWrite:
        config = SilverRunConfig(**context.op_execution_context.op_config)
        op_context = context.op_execution_context
        # The deployment's permission for the override (this entry's rule); what the rebuild
        # does, and the override's audit record, are the run's (`PipelineRunner.finish`).
        refuse_unless_permitted(
            allow_destructive,
            ["override_fail_fast"] if config.override_fail_fast else [],
            control=lake.control(),
            context=op_context,
            table=spec.target,
            action=OVERRIDE_ACTION,
            pipeline_id=spec.id,
            metadata={"pipeline_id": spec.id},
        )
        # Before Spark work that may take a while, what it will apply; a no-op or an advance
        # (no Spark, milliseconds) says it once, in the result's line: a shared run of a
        # fleet's advances writes one event less per pipeline.
        if config.force_rebuild or bronze.plan.mode not in (RunMode.NOOP, RunMode.ADVANCE):
            context.log.info(
                "pinned change set: %s (planned from the logs in %.2f s)",
                bronze.plan.describe(),
                bronze.prepared.plan_seconds,
            )
        return PipelineWrite(
            bronze.prepared,
            force_rebuild=config.force_rebuild,
            repair_of=config.repair_of,
            override_fail_fast=config.override_fail_fast,
        )

    return _silver


def silver_assets(
    specs: list[PipelineSpec], *, allow_destructive: bool = False
) -> list[dg.AssetsDefinition]:
    """One silver asset per spec (`allow_destructive`: as `silver_asset`'s)."""
    return [silver_asset(spec, allow_destructive=allow_destructive) for spec in specs]
