"""Demo bronze assets: the demo sources that feed the silver pipelines (materializable here,
unlike the external bronze assets of the production definitions)."""

import dagster as dg
from pydantic import Field

from cdf_platform.demo.source import DEMO_KEYS, write_demo_batch
from cdf_platform.orchestration.keys import BRONZE_PREFIX
from cdf_platform.orchestration.resources import LakeLayout


class DemoBatchConfig(dg.Config):
    """How much one materialization of a demo bronze table writes."""

    batch_size: int = Field(default=1_000, ge=1, description="Rows touched by one batch.")
    seed: int = Field(default=7, description="Seed of the deterministic batch generator.")


def bronze_path(lake_root: str, table: str) -> str:
    """Where the bronze table `table` lives under `lake_root`."""
    return f"{lake_root.rstrip('/')}/{BRONZE_PREFIX}/{table}"


def demo_bronze_asset(table: str) -> dg.AssetsDefinition:
    """A bronze asset whose every materialization commits one deterministic demo batch."""

    @dg.asset(
        name=table,
        key_prefix=BRONZE_PREFIX,
        group_name=BRONZE_PREFIX,
        kinds={"delta"},
        description=(
            f"Raw `{table}` as landed by the operational system: a CDF-enabled Delta table "
            "where each batch inserts, updates and deletes rows in one commit (written by "
            "deltalake, without Spark). Silver reads its change feed."
        ),
    )
    def _bronze(
        context: dg.AssetExecutionContext,
        config: DemoBatchConfig,
        lake: LakeLayout,
    ) -> dg.MaterializeResult:
        path = bronze_path(lake.lake_root, table)
        batch = write_demo_batch(path, table, batch_size=config.batch_size, seed=config.seed)
        context.log.info("bronze %s: %s", table, batch)
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(path),
                "key": DEMO_KEYS[table],
                "version": batch.version,
                "rows_inserted": batch.inserted,
                "rows_updated": batch.updated,
                "rows_deleted": batch.deleted,
            }
        )

    return _bronze


demo_bronze_assets = [demo_bronze_asset(table) for table in sorted(DEMO_KEYS)]
