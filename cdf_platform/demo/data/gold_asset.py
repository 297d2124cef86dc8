"""Gold assets: business aggregates maintained from silver's own change feed, through the
watermark IO manager."""

import dagster as dg

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.demo.data.gold import customer_order_totals
from cdf_platform.orchestration.shared.keys import WATERMARK_IO_MANAGER_KEY, silver_key
from cdf_platform.orchestration.shared.step_failures import platform_failure
from cdf_platform.spark.read.batch import ChangeBatch, TableWrite

GOLD_PREFIX = "gold"
CUSTOMER_ORDER_TOTALS = "customer_order_totals"
CUSTOMER_ORDER_TOTALS_KEY = dg.AssetKey([GOLD_PREFIX, CUSTOMER_ORDER_TOTALS])
# One run at a time writes the totals (the demo instance limits every pool to one run).
CUSTOMER_ORDER_TOTALS_POOL = "cdf_gold_customer_order_totals"


def _batch_metadata(orders: ChangeBatch) -> dict[str, dg.MetadataValue]:
    """What the run read of silver orders: its mode, silver's versions (the watermark before,
    the range read, the pinned end), and why a full batch was full (the IO manager adds what
    it wrote). Absent values are null."""

    def version(value: int | None) -> dg.MetadataValue:
        return dg.MetadataValue.null() if value is None else dg.MetadataValue.int(value)

    def text(value: str | None) -> dg.MetadataValue:
        return dg.MetadataValue.null() if value is None else dg.MetadataValue.text(value)

    problem = orders.plan.problem
    return {
        "mode": dg.MetadataValue.text(orders.mode.value),
        "watermark_before": version(orders.plan.watermark),
        "start_version": version(orders.start_version),
        "end_version": dg.MetadataValue.int(orders.end_version),
        "reason": text(orders.plan.reason),
        "incident_code": text(problem.incident_code if problem is not None else None),
    }


def customer_order_totals_asset(orders_pipeline_id: str = "orders") -> dg.AssetsDefinition:
    """`gold/customer_order_totals`, fed by the silver asset of `orders_pipeline_id`; written
    by the watermark IO manager to `<lake_root>/gold/customer_order_totals`."""

    @dg.asset(
        key=CUSTOMER_ORDER_TOTALS_KEY,
        ins={"orders": dg.AssetIn(silver_key(orders_pipeline_id))},
        io_manager_key=WATERMARK_IO_MANAGER_KEY,
        group_name=GOLD_PREFIX,
        kinds={"spark", "delta"},
        pool=CUSTOMER_ORDER_TOTALS_POOL,
        description=(
            "Live orders and revenue per customer (customer_id, order_count, total_amount): "
            "what account managers look at. Maintained incrementally from the change feed of "
            f"`silver/{orders_pipeline_id}`: each run applies only the orders that changed "
            "since the last one, and recomputes from a silver snapshot on its first run or if "
            "that feed was vacuumed. Not refreshed while silver's replay window is lost (the "
            "blocking `replay_window` check)."
        ),
    )
    def _customer_order_totals(
        context: dg.AssetExecutionContext, orders: ChangeBatch
    ) -> TableWrite | None:
        context.add_output_metadata(_batch_metadata(orders))
        try:
            # Builds Spark plans only: silver's rows are read by the IO manager's write.
            return customer_order_totals(orders)
        except CdfPlatformError as err:
            raise platform_failure(err) from err

    return _customer_order_totals
