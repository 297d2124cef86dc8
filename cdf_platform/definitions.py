"""The one Definitions entry point of cdf_platform (workspace.yaml and `dagster dev` load it).

Building the definitions reads the pipelines file (one silver asset and two checks per
pipeline); nothing starts Spark at import.
"""

import dagster as dg

from cdf_platform.demo.bronze_assets import demo_bronze_assets
from cdf_platform.demo.gold_asset import customer_order_totals_asset
from cdf_platform.demo.jobs import demo_bronze_job, gold_job
from cdf_platform.orchestration.checks_job import checks_job, checks_schedule
from cdf_platform.orchestration.consumer_lag import consumer_lag_check
from cdf_platform.orchestration.external import external_bronze_assets
from cdf_platform.orchestration.incremental_job import incremental_job
from cdf_platform.orchestration.incremental_sensor import incremental_sensor
from cdf_platform.orchestration.lake_resource import ControlTableResource
from cdf_platform.orchestration.maintenance_jobs import (
    build_maintenance_jobs,
    build_maintenance_schedules,
)
from cdf_platform.orchestration.rebuild_job import build_rebuild_job
from cdf_platform.orchestration.rebuild_sensor import rebuild_sensor
from cdf_platform.orchestration.replay_window_check import replay_window_check
from cdf_platform.orchestration.silver import WATERMARK_IO_MANAGER_KEY, silver_assets
from cdf_platform.orchestration.spark_resource import SparkResource
from cdf_platform.orchestration.watermark_io import WatermarkIOManager

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
