"""Gold assets: business aggregates maintained from silver's own change feed."""

import dagster as dg

from cdf_platform.core.errors import CdfPlatformError
from cdf_platform.demo.gold import (
    CONSUMER_ID,
    RefreshOutcome,
    refresh_customer_order_totals,
)
from cdf_platform.orchestration.keys import silver_key
from cdf_platform.orchestration.resources import LakeLayout, SparkResource

GOLD_PREFIX = "gold"
CUSTOMER_ORDER_TOTALS = "customer_order_totals"
CUSTOMER_ORDER_TOTALS_KEY = dg.AssetKey([GOLD_PREFIX, CUSTOMER_ORDER_TOTALS])


def _outcome_metadata(outcome: RefreshOutcome, path: str) -> dict[str, dg.MetadataValue]:
    def version(value: int | None) -> dg.MetadataValue:
        return dg.MetadataValue.null() if value is None else dg.MetadataValue.int(value)

    return {
        "mode": dg.MetadataValue.text(outcome.mode.value),
        "watermark_before": version(outcome.watermark_before),
        "start_version": version(outcome.start_version),
        "end_version": dg.MetadataValue.int(outcome.end_version),
        "rows_written": dg.MetadataValue.int(outcome.rows_written),
        "spark_started": dg.MetadataValue.bool(outcome.spark_started),
        "duration_seconds": dg.MetadataValue.float(round(outcome.duration_seconds, 3)),
        "reason": dg.MetadataValue.text(outcome.reason or ""),
        "path": dg.MetadataValue.path(path),
    }


def customer_order_totals_asset(orders_pipeline_id: str = "orders") -> dg.AssetsDefinition:
    """`gold/customer_order_totals`, fed by the silver asset of `orders_pipeline_id`."""

    @dg.asset(
        key=CUSTOMER_ORDER_TOTALS_KEY,
        deps=[silver_key(orders_pipeline_id)],
        group_name=GOLD_PREFIX,
        kinds={"spark", "delta"},
        pool=f"cdf_{CONSUMER_ID}",
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
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        lake: LakeLayout,
    ) -> dg.MaterializeResult:
        silver = lake.spec(orders_pipeline_id).target
        target = lake.table_path(GOLD_PREFIX, CUSTOMER_ORDER_TOTALS)
        try:
            outcome = refresh_customer_order_totals(
                spark_factory=lambda: spark.spark_session, silver=silver, target=target
            )
        except CdfPlatformError as err:
            raise dg.Failure(
                str(err), metadata={"incident_code": err.incident_code}, allow_retries=False
            ) from err
        context.log.info(
            "customer_order_totals: %s, silver versions %s..%s, %d rows written",
            outcome.mode.value,
            outcome.start_version,
            outcome.end_version,
            outcome.rows_written,
        )
        return dg.MaterializeResult(metadata=_outcome_metadata(outcome, target))

    return _customer_order_totals
