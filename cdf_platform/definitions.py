"""The one Definitions entry point of cdf_platform (workspace.yaml and `dagster dev` load it).

Nothing runs at import: `defs` is loaded lazily by Dagster's tools. Loading reads the lake
layout from the environment (`CDF_LAKE_ROOT`, `CDF_CONTROL_ROOT`, `CDF_PIPELINES_FILE`,
`CDF_SPARK_MASTER`, as `dg.EnvVar` where set) and binds the pipelines file's specs: one silver
asset with its checks per pipeline, and every bronze table as an external asset. Nothing starts
Spark until a run needs it. The demo has its own definitions (`cdf_platform.demo.definitions`).
"""

from collections.abc import Collection

import dagster as dg

from cdf_platform.orchestration.checks import silver_checks
from cdf_platform.orchestration.external import external_bronze_assets
from cdf_platform.orchestration.incremental_sensor import build_incremental_sensor
from cdf_platform.orchestration.jobs import (
    build_rebuild_job,
    checks_job,
    checks_schedule,
    incremental_job,
)
from cdf_platform.orchestration.maintenance_jobs import (
    build_maintenance_jobs,
    build_maintenance_schedules,
)
from cdf_platform.orchestration.rebuild_sensor import build_rebuild_sensor
from cdf_platform.orchestration.resources import LakeLayout, SparkResource
from cdf_platform.orchestration.silver import silver_assets


def build_defs(
    lake: LakeLayout | None = None,
    spark: SparkResource | None = None,
    *,
    bronze_written_here: Collection[dg.AssetKey] = (),
) -> dg.Definitions:
    """The platform's definitions for the pipelines `lake` lists.

    Args:
        lake: pipelines file, lake root and control tables (default: from the environment).
        spark: the Spark resource (default: from the environment).
        bronze_written_here: bronze asset keys that other definitions merged with these
            materialize (the demo's writers); every other bronze table is an external asset.
    """
    lake = lake or LakeLayout.from_environment()
    bound = lake.bound()
    specs = bound.specs()
    spark = spark or SparkResource.from_environment(storage_locations=bound.storage_locations())
    maintenance_jobs = build_maintenance_jobs(specs)
    return dg.Definitions(
        assets=[*external_bronze_assets(specs, bronze_written_here), *silver_assets(specs)],
        asset_checks=silver_checks(specs),
        jobs=[incremental_job, build_rebuild_job(specs), checks_job, *maintenance_jobs],
        schedules=[checks_schedule, *build_maintenance_schedules(maintenance_jobs)],
        sensors=[build_incremental_sensor(specs), build_rebuild_sensor(specs)],
        resources={"spark": spark, "lake": lake},
        # PySpark DataFrames cannot be pickled between processes, and one SparkSession per
        # process is the unit of cost: Spark work runs in the run's own process.
        executor=dg.in_process_executor,
    )


@dg.definitions
def defs() -> dg.Definitions:
    """The platform's definitions on the environment's lake (loaded by Dagster, not at import)."""
    return build_defs()
