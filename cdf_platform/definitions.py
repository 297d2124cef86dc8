"""The one Definitions entry point of cdf_platform (workspace.yaml and `dagster dev` load it).

Building the definitions reads the pipelines file (one silver asset and two checks per
pipeline); nothing starts Spark at import.
"""

import dagster as dg

from cdf_platform.assets.bronze import demo_bronze_assets
from cdf_platform.assets.external import external_bronze_assets
from cdf_platform.assets.gold import customer_order_totals_asset
from cdf_platform.assets.silver import WATERMARK_IO_MANAGER_KEY, silver_assets
from cdf_platform.checks.consumer_lag import consumer_lag_check
from cdf_platform.checks.replay_window import replay_window_check
from cdf_platform.io_managers.watermark import WatermarkIOManager
from cdf_platform.jobs.checks import checks_job, checks_schedule
from cdf_platform.jobs.demo import demo_bronze_job, gold_job
from cdf_platform.jobs.incremental import incremental_job
from cdf_platform.jobs.maintenance import build_maintenance_jobs, build_maintenance_schedules
from cdf_platform.jobs.rebuild import build_rebuild_job
from cdf_platform.resources.control import ControlTableResource
from cdf_platform.resources.spark import SparkResource
from cdf_platform.sensors.incremental import incremental_sensor
from cdf_platform.sensors.rebuild import rebuild_sensor

# The pipeline whose silver table feeds gold/customer_order_totals.
ORDERS_PIPELINE = "orders"


def build_defs(
    control_table: ControlTableResource | None = None, spark: SparkResource | None = None
) -> dg.Definitions:
    """The platform's definitions for the pipelines `control_table` lists.

    Args:
        control_table: pipelines file, lake root and control tables (default: from the
            environment, see `ControlTableResource`).
        spark: the Spark resource (default: from the environment, see `SparkResource`).
    """
    control_table = control_table or ControlTableResource()
    spark = spark or SparkResource()
    specs = control_table.specs()
    maintenance_jobs = build_maintenance_jobs(specs)
    gold = (
        [customer_order_totals_asset(ORDERS_PIPELINE)]
        if any(spec.id == ORDERS_PIPELINE for spec in specs)
        else []
    )
    return dg.Definitions(
        assets=[
            *demo_bronze_assets,
            *external_bronze_assets(specs),
            *silver_assets(specs),
            *gold,
        ],
        asset_checks=[
            check
            for spec in specs
            for check in (consumer_lag_check(spec), replay_window_check(spec))
        ],
        jobs=[
            incremental_job,
            build_rebuild_job(specs),
            checks_job,
            demo_bronze_job,
            gold_job,
            *maintenance_jobs,
        ],
        schedules=[checks_schedule, *build_maintenance_schedules(maintenance_jobs)],
        sensors=[incremental_sensor, rebuild_sensor],
        resources={
            "spark": spark,
            "control_table": control_table,
            WATERMARK_IO_MANAGER_KEY: WatermarkIOManager(control_table=control_table),
        },
        # PySpark DataFrames cannot be pickled between processes, and one SparkSession per
        # process is the unit of cost: Spark work runs in the run's own process.
        executor=dg.in_process_executor,
    )


defs = build_defs()
