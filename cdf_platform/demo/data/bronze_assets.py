"""Demo bronze assets: the demo sources that feed the silver pipelines (materializable here,
unlike the external bronze assets of the production definitions): row tables whose batches
insert, update and delete rows, and a change-event log whose batches append events."""

import dagster as dg
from pydantic import Field

from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.demo.data.events import EVENT_KEYS, EventBatch, write_event_batch
from cdf_platform.demo.data.source import DEMO_KEYS, DemoBatch, write_demo_batch
from cdf_platform.orchestration.shared.keys import BRONZE_PREFIX
from cdf_platform.orchestration.shared.resources import LakeLayout

# Every demo bronze table -> its key.
DEMO_TABLES = {**DEMO_KEYS, **EVENT_KEYS}

ROW_TABLE_DESCRIPTION = (
    "Raw `{table}` as landed by the operational system: a CDF-enabled Delta table where each "
    "batch inserts, updates and deletes rows in one commit (written by deltalake, without "
    "Spark). Silver reads its change feed."
)
EVENT_LOG_DESCRIPTION = (
    "Raw `{table}` as a Debezium connector lands it: an append-only, CDF-enabled Delta table "
    "of change events (`before`/`after` row images, `op` c/u/d/r, `ts_ms`), each batch one "
    "commit holding inserts, updates, deletes, several events of a key and late events "
    "(written by deltalake, without Spark). Silver folds the events appended since its "
    "watermark, per key the one with the highest `ts_ms`."
)


class DemoBatchConfig(dg.Config):
    """How much one materialization of a demo bronze table writes."""

    batch_size: int = Field(
        default=1_000, ge=1, description="Rows (the event log: keys) touched by one batch."
    )
    seed: int = Field(default=7, description="Seed of the deterministic batch generator.")


def bronze_path(lake_root: str, table: str) -> str:
    """Where the bronze table `table` lives under `lake_root`."""
    return f"{lake_root.rstrip('/')}/{BRONZE_PREFIX}/{table}"


def write_batch(
    path: str, table: str, config: DemoBatchConfig, storage: StorageConfig = ENVIRONMENT_ONLY
) -> DemoBatch | EventBatch:
    """One deterministic batch into the demo bronze table `table` at `path` (with the lake's
    object-store options `storage`): events for the event log, row changes for the others."""
    size, seed = config.batch_size, config.seed
    if table in EVENT_KEYS:
        return write_event_batch(path, batch_size=size, seed=seed, storage=storage)
    return write_demo_batch(path, table, batch_size=size, seed=seed, storage=storage)


def demo_bronze_asset(table: str) -> dg.AssetsDefinition:
    """A bronze asset whose every materialization commits one deterministic demo batch."""
    description = EVENT_LOG_DESCRIPTION if table in EVENT_KEYS else ROW_TABLE_DESCRIPTION

    @dg.asset(
        name=table,
        key_prefix=BRONZE_PREFIX,
        group_name=BRONZE_PREFIX,
        kinds={"delta"},
        description=description.format(table=table),
    )
    def _bronze(
        context: dg.AssetExecutionContext,
        config: DemoBatchConfig,
        lake: LakeLayout,
    ) -> dg.MaterializeResult:
        resolved = lake.lake()
        path = bronze_path(resolved.lake_root, table)
        batch = write_batch(path, table, config, resolved.storage)
        context.log.info("bronze %s: %s", table, batch)
        return dg.MaterializeResult(
            metadata={
                "path": dg.MetadataValue.path(path),
                "key": DEMO_TABLES[table],
                **batch.metadata(),
            }
        )

    return _bronze


demo_bronze_assets = [demo_bronze_asset(table) for table in sorted(DEMO_TABLES)]
