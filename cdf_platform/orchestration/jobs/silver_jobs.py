"""The platform's jobs over silver and their schedule.

- `incremental_job`: bring silver assets up to date with their bronze tables. Each silver asset
  runs in the mode its plan picks (incremental, initial load, fallback rebuild, or a no-op that
  never starts Spark), followed by its checks. The incremental sensor launches it for one
  pipeline at a time.
- `rebuild_job`: reconcile silver from a pinned bronze snapshot. A rebuild is a materialization
  of the silver asset with `force_rebuild: true`, so it holds the pipeline's pool (never
  concurrent with an incremental run of the same pipeline), records the incident on silver's
  materialization and re-evaluates silver's checks in the same run. Launch it for one silver
  asset ("Materialize selected" in the UI, or `asset_selection` in a run request). A FAIL_FAST
  pipeline refuses unless its config also says `override_fail_fast: true`.
- `checks_job` and `checks_schedule`: evaluate silver's checks without materializing silver,
  and refresh the all-pipelines overview (`platform/pipelines`). The checks read logs only, so
  this job never starts Spark. Each evaluation stores numeric lag and headroom figures (plotted
  on the checks' pages) and feeds the rebuild sensor.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING

import dagster as dg

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.assets.overview import OVERVIEW_KEY
from cdf_platform.orchestration.assets.silver import SilverRunConfig
from cdf_platform.orchestration.shared.keys import (
    CHECKS_QUEUE,
    QUEUE_TAG,
    SILVER_PREFIX,
    SILVER_QUEUE,
    silver_key,
    silver_op_name,
)

if TYPE_CHECKING:
    # Not exported at the top level of dagster; the type of what define_asset_job returns.
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

INCREMENTAL_JOB = "incremental_job"
REBUILD_JOB = "rebuild_job"
CHECKS_JOB = "checks_job"
CHECKS_SCHEDULE = "checks_schedule"
# checks_schedule's period: on the hour and every quarter of it.
CHECKS_EVERY_MINUTES = 15

_SILVER = dg.AssetSelection.groups(SILVER_PREFIX)

incremental_job = dg.define_asset_job(
    INCREMENTAL_JOB,
    # A group selection includes the checks of the selected assets.
    selection=_SILVER,
    tags={QUEUE_TAG: SILVER_QUEUE},
    description="Apply new bronze versions to silver (per pipeline: incremental MERGE, initial "
    "load, fallback rebuild, or nothing), then evaluate silver's checks.",
)


def build_checks_job(
    consumer_checks: Sequence[dg.AssetCheckKey] = (),
) -> "UnresolvedAssetJobDefinition":
    """`checks_job`: silver's checks, the consumer assets' `consumer_checks` and the overview."""
    return dg.define_asset_job(
        CHECKS_JOB,
        # The checks that target silver assets, without the assets themselves, the consumers'
        # lag and window checks, and the overview.
        selection=(_SILVER - _SILVER.without_checks())
        | dg.AssetSelection.checks(*consumer_checks)
        | dg.AssetSelection.assets(OVERVIEW_KEY),
        # Its own queue: a deployment keeps a run slot for it that silver runs cannot take
        # (deploy/dagster.yaml), so a checks run never waits behind a queue of silver runs.
        tags={QUEUE_TAG: CHECKS_QUEUE},
        description="Evaluate consumer_lag and replay_window on every silver asset and consumer "
        "asset and refresh the all-pipelines overview (no Spark).",
    )


def build_checks_schedule(
    checks_job: "UnresolvedAssetJobDefinition", *, running: bool = True
) -> dg.ScheduleDefinition:
    """`checks_schedule` of `checks_job`, RUNNING from the start unless `running` is False: the
    rebuild sensor repairs only what the checks report."""
    return dg.ScheduleDefinition(
        name=CHECKS_SCHEDULE,
        job=checks_job,
        # Often enough that a window shrinking by hours is seen long before it is lost, and that
        # the rebuild sensor reacts within minutes; each evaluation costs well under a second.
        cron_schedule=f"*/{CHECKS_EVERY_MINUTES} * * * *",
        description="Evaluate silver's checks every 15 minutes.",
        default_status=dg.DefaultScheduleStatus.RUNNING
        if running
        else dg.DefaultScheduleStatus.STOPPED,
    )


def rebuild_run_config(
    pipeline_id: str, *, override_fail_fast: bool = False, repair_of: int | None = None
) -> dg.RunConfig:
    """Run config of a rebuild of `pipeline_id` (for run requests and launches); `repair_of`:
    the watermark of the loss it repairs (the rebuild sensor's), see `SilverRunConfig`."""
    return dg.RunConfig(
        ops={
            silver_op_name(pipeline_id): SilverRunConfig(
                force_rebuild=True, override_fail_fast=override_fail_fast, repair_of=repair_of
            )
        }
    )


def build_rebuild_job(specs: list[PipelineSpec]) -> "UnresolvedAssetJobDefinition":
    """The rebuild job over the silver assets of `specs`, rebuilding by default."""
    return dg.define_asset_job(
        REBUILD_JOB,
        selection=dg.AssetSelection.assets(*(silver_key(spec.id) for spec in specs)),
        config=dg.RunConfig(
            ops={silver_op_name(spec.id): SilverRunConfig(force_rebuild=True) for spec in specs}
        ),
        tags={QUEUE_TAG: SILVER_QUEUE},
        description="Reconcile the selected silver assets from a pinned bronze snapshot and "
        "stamp that version as the watermark (select one pipeline; FAIL_FAST pipelines need "
        "`override_fail_fast: true`).",
    )
