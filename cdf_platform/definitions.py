"""The one Definitions entry point of cdf_platform (workspace.yaml and `dagster dev` load it).

Nothing runs at import: `defs` is loaded lazily by Dagster's tools. Loading reads the lake
layout from the environment (`CDF_LAKE_ROOT`, `CDF_CONTROL_ROOT`, `CDF_PIPELINES_FILE`,
`CDF_SPARK_MASTER`, as `dg.EnvVar` where set) and binds the pipelines file's specs: one silver
asset with its checks per pipeline, and every bronze table as an external asset
(`cdf_platform.orchestration.platform`; the Component builds the same from `defs.yaml`).
Nothing starts Spark until a run needs it. The demo has its own definitions
(`cdf_platform.demo.demo_definitions`).
"""

from collections.abc import Collection, Sequence

import dagster as dg

from cdf_platform.core.config import default_automation
from cdf_platform.orchestration.platform import platform_defs
from cdf_platform.orchestration.shared.resources import LakeLayout, SparkResource


def build_defs(
    lake: LakeLayout | None = None,
    spark: SparkResource | None = None,
    *,
    bronze_written_here: Collection[dg.AssetKey] = (),
    consumers: Sequence[dg.AssetsDefinition] = (),
    automation: bool | None = None,
    allow_destructive: bool | None = None,
) -> dg.Definitions:
    """The platform's definitions for the pipelines `lake` lists.

    Args:
        lake: pipelines file, lake root and control tables (default: from the environment).
        spark: the Spark resource (default: from the environment).
        bronze_written_here: bronze asset keys that other definitions merged with these
            materialize (the demo's writers); every other bronze table is an external asset.
        consumers: your assets that read these tables through the watermark IO manager
            (docs/incremental-assets.md): they get silver's lag and replay-window
            checks, automatic repair of a lost window and a say in VACUUM.
        automation: the incremental and rebuild sensors, the checks schedule and the weekly
            verification start RUNNING (default: `$CDF_AUTOMATION`, on unless `off`).
        allow_destructive: run configs that destroy history or skip a guard may run
            (default: `$CDF_ALLOW_DESTRUCTIVE`, else no; docs/production.md).
    """
    lake = lake or LakeLayout.from_environment()
    resolved = lake.lake()
    return platform_defs(
        resolved.specs(),
        lake,
        spark,
        bronze_written_here=bronze_written_here,
        consumers=consumers,
        automation=default_automation() if automation is None else automation,
        allow_destructive=allow_destructive,
        alerts=resolved.alerts(),
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The platform's definitions on the environment's lake (loaded by Dagster, not at import)."""
    return build_defs()
