"""The demo's Definitions: the platform's definitions merged with the demo's own bronze writers,
the gold asset fed by silver orders, and their jobs.

Used by `cdf-platform demo` and by `make dev` on the demo's instance (workspace.demo.yaml); the
production entry point (`cdf_platform.definitions`) never includes any of it, so a real bronze
table named `orders` stays an external asset there.
"""

import dagster as dg

from cdf_platform.definitions import build_defs
from cdf_platform.demo.data.bronze_assets import demo_bronze_assets
from cdf_platform.demo.data.gold_asset import customer_order_totals_asset
from cdf_platform.demo.data.jobs import demo_bronze_job, gold_job
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource

# The demo pipeline whose silver table feeds gold/customer_order_totals.
ORDERS_PIPELINE = "orders"


def build_demo_defs(
    lake: LakeLayout | None = None,
    spark: SparkResource | None = None,
    *,
    allow_destructive: bool | None = None,
) -> dg.Definitions:
    """The platform's definitions for the pipelines `lake` lists, plus the demo's assets.

    Args:
        lake: pipelines file, lake root and control tables (default: from the environment).
        spark: the Spark resource (default: from the environment).
        allow_destructive: as `build_defs`'s (default: `$CDF_ALLOW_DESTRUCTIVE`, else no).
    """
    lake = lake or LakeLayout.from_environment()
    writers = [asset.key for asset in demo_bronze_assets]
    specs = lake.lake().specs()
    gold = (
        [customer_order_totals_asset(ORDERS_PIPELINE)]
        if any(spec.id == ORDERS_PIPELINE for spec in specs)
        else []
    )
    # Gold is a consumer of the watermark IO manager: the platform checks, repairs and
    # protects it like silver.
    platform = build_defs(
        lake,
        spark,
        bronze_written_here=writers,
        consumers=gold,
        allow_destructive=allow_destructive,
    )
    demo = dg.Definitions(assets=demo_bronze_assets, jobs=[demo_bronze_job, gold_job])
    return dg.Definitions.merge(platform, demo)


@dg.definitions
def defs() -> dg.Definitions:
    """The demo's definitions on the environment's lake (loaded by Dagster, not at import)."""
    return build_demo_defs()
