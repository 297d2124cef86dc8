"""`rebuild_job`: reconcile silver from a pinned bronze snapshot.

A rebuild is a materialization of the silver asset with `force_rebuild: true`, so it holds the
pipeline's pool (never concurrent with an incremental run of the same pipeline), records the
incident on silver's materialization and re-evaluates silver's checks in the same run. Launch it
for one silver asset ("Materialize selected" in the UI, or `asset_selection` in a run request).
A FAIL_FAST pipeline refuses unless its config also says `override_fail_fast: true`.
"""

from typing import TYPE_CHECKING

import dagster as dg

from cdf_platform.core.spec import PipelineSpec
from cdf_platform.orchestration.silver import SilverRunConfig, silver_key, silver_op_name

if TYPE_CHECKING:
    # Not exported at the top level of dagster; the type of what define_asset_job returns.
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

REBUILD_JOB = "rebuild_job"


def rebuild_run_config(pipeline_id: str, *, override_fail_fast: bool = False) -> dg.RunConfig:
    """Run config of a rebuild of `pipeline_id` (for run requests and launches)."""
    return dg.RunConfig(
        ops={
            silver_op_name(pipeline_id): SilverRunConfig(
                force_rebuild=True, override_fail_fast=override_fail_fast
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
        description="Reconcile the selected silver assets from a pinned bronze snapshot and "
        "stamp that version as the watermark (select one pipeline; FAIL_FAST pipelines need "
        "`override_fail_fast: true`).",
    )
