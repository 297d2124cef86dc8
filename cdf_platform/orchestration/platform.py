"""The platform's Definitions for a list of pipelines: what the classic entry point
(`cdf_platform.definitions`, a pipelines file) and the Component (`CdfPipelinesComponent`,
`defs.yaml`) both build, so the two ways in give the same asset graph.
"""

from collections.abc import Collection, Sequence

import dagster as dg

from cdf_platform.core.alert_config import AlertConfig
from cdf_platform.core.config import default_allow_destructive, default_pipelines_per_run
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.assets.external import external_bronze_assets
from cdf_platform.orchestration.assets.overview import overview_asset
from cdf_platform.orchestration.assets.silver import silver_assets
from cdf_platform.orchestration.checks.silver_checks import silver_checks
from cdf_platform.orchestration.io_manager.watermark_io_manager import (
    RESOURCE_KEY,
    WatermarkIOManager,
)
from cdf_platform.orchestration.jobs.maintenance_jobs import (
    build_maintenance_job,
    build_maintenance_schedule,
)
from cdf_platform.orchestration.jobs.silver_jobs import (
    build_checks_job,
    build_checks_schedule,
    build_rebuild_job,
    incremental_job,
)
from cdf_platform.orchestration.jobs.verify_job import build_verify_job, build_verify_schedule
from cdf_platform.orchestration.sensors.alert_sensor import build_alert_sensor
from cdf_platform.orchestration.sensors.consumer_sensor import (
    build_consumer_job,
    build_consumer_sensor,
)
from cdf_platform.orchestration.sensors.consumers import (
    ConsumerAsset,
    build_recompute_job,
    consumer_check_keys,
    consumer_checks,
)
from cdf_platform.orchestration.sensors.incremental_sensor import build_incremental_sensor
from cdf_platform.orchestration.sensors.rebuild_sensor import build_rebuild_sensor
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.orchestration.shared.storage_options_config import StorageOptionsConfig


def platform_defs(
    specs: list[PipelineSpec],
    lake: LakeLayout,
    spark: SparkResource | None = None,
    *,
    bronze_written_here: Collection[dg.AssetKey] = (),
    consumers: Sequence[dg.AssetsDefinition] = (),
    automation: bool = True,
    pipelines_per_run: int | None = None,
    allow_destructive: bool | None = None,
    alerts: AlertConfig | None = None,
) -> dg.Definitions:
    """Silver assets with their checks, external bronze assets, the jobs, schedules and
    sensors, the `spark` and `lake` resources and the watermark IO manager, for `specs`
    (locations resolved).

    Args:
        specs: the pipelines, relative locations resolved under the lake root.
        lake: lake root, control tables and object-store options (the `lake` resource).
        spark: the Spark resource (default: from the environment, with the specs' stores and
            the lake's object-store options).
        bronze_written_here: bronze asset keys that other definitions merged with these
            materialize (the demo's writers); every other bronze table is an external asset.
        consumers: assets written by the watermark IO manager that read these tables through
            it (docs/incremental-assets.md); each gets silver's checks, repair by the
            rebuild sensor (`recompute_job`) and a say in the VACUUM of what it reads
            (`cdf_platform.orchestration.sensors.consumers`).
        automation: the incremental and rebuild sensors, the checks schedule and the weekly
            verification start RUNNING (False: STOPPED, for a person to turn on).
        pipelines_per_run: at most this many pipelines with small change sets share a silver
            run (default: `$CDF_PIPELINES_PER_RUN`, else 50).
        allow_destructive: run configs that destroy history or skip a guard may run
            (`cdf_platform.orchestration.shared.destructive`; default: `$CDF_ALLOW_DESTRUCTIVE`,
            else no). Fixed when the definitions load: no run config changes it.
        alerts: where alerts go (the `alerts:` section): with it, `alert_sensor` tells them
            (`cdf_platform.orchestration.sensors.alert_sensor`).
    """
    if allow_destructive is None:
        allow_destructive = default_allow_destructive()
    # The lake, resolved once here: invalid storage options stop the definitions loading. Its
    # sensors, checks and runs read the stores with the options of the `lake` resource they
    # are handed (`LakeLayout.lake`), never with a setting of the process.
    resolved = lake.lake()
    if spark is None:
        spark = SparkResource.from_environment(
            storage_locations=resolved.storage_locations(specs),
            # References stay references (dg.EnvVar): the UI shows no secret.
            storage=StorageOptionsConfig.of_config(lake.storage_config()),
        )
    bronze = external_bronze_assets(specs, bronze_written_here)
    silver = silver_assets(specs, allow_destructive=allow_destructive)
    watched = [ConsumerAsset.of(asset) for asset in consumers]
    upstream_metadata = {spec.key: spec.metadata for spec in bronze}
    for asset in [*silver, *consumers]:
        upstream_metadata.update({key: s.metadata for key, s in asset.specs_by_key.items()})
    maintenance_job, maintained = build_maintenance_job(
        specs,
        {key for consumer in watched for key in consumer.inputs.values()},
        allow_destructive=allow_destructive,
    )
    checks_job = build_checks_job(consumer_check_keys(watched))
    rebuild_job = build_rebuild_job(specs)
    verify_job = build_verify_job(specs)
    repair_jobs = [rebuild_job, build_recompute_job(watched)] if watched else []
    consumer_job = build_consumer_job(watched) if watched else None
    consumer_sensors = (
        [build_consumer_sensor(watched, upstream_metadata, consumer_job, running=automation)]
        if consumer_job
        else []
    )
    asset_checks = [
        *silver_checks(specs),
        *(consumer_checks(consumer, upstream_metadata) for consumer in watched),
    ]
    check_keys = [key for checks in asset_checks for key in checks.check_keys]
    return dg.Definitions(
        assets=[*bronze, *silver, *consumers, overview_asset(specs)],
        asset_checks=asset_checks,
        jobs=[
            incremental_job,
            rebuild_job,
            checks_job,
            *repair_jobs[1:],
            *([consumer_job] if consumer_job else []),
            maintenance_job,
            verify_job,
        ],
        schedules=[
            build_checks_schedule(checks_job, running=automation),
            build_verify_schedule(verify_job, running=automation),
            build_maintenance_schedule(maintenance_job, maintained),
        ],
        sensors=[
            build_incremental_sensor(
                specs,
                lake,
                running=automation,
                max_pipelines_per_run=pipelines_per_run or default_pipelines_per_run(),
            ),
            build_rebuild_sensor(specs, consumers=watched, jobs=repair_jobs, running=automation),
            *consumer_sensors,
            *([build_alert_sensor(specs, alerts, check_keys)] if alerts is not None else []),
        ],
        resources={
            "spark": spark,
            "lake": lake,
            # Any asset reading these Delta tables' changes exactly once
            # (docs/incremental-assets.md).
            RESOURCE_KEY: WatermarkIOManager(spark=spark, lake=lake),
        },
        # PySpark DataFrames cannot be pickled between processes, and one SparkSession per
        # process is the unit of cost: Spark work runs in the run's own process.
        executor=dg.in_process_executor,
    )
