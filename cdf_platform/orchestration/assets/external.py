"""External bronze assets: bronze tables written by other systems (ingestion tools, streaming
jobs, another team's pipelines) that the platform only reads.

Every pipeline's bronze table is an external asset `bronze/<bronze_name>` (unless the
definitions are given an asset that writes it, as the demo does): Dagster shows it in the
lineage upstream of silver, but never materializes it. To point the platform at your own lake,
list your tables in the pipelines file:

    pipelines:
      - id: payments
        source: /mnt/landing/payments     # any CDF-enabled Delta table (absolute: as is)
        target: silver/payments
        keys: [payment_id]
        bronze_table: payments            # asset key bronze/payments (default: last path part)
"""

from collections.abc import Collection

import dagster as dg

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.shared.keys import (
    BRONZE_PREFIX,
    WATERMARK_IO_MANAGER_KEY,
    bronze_key,
)


def external_bronze_asset(spec: PipelineSpec) -> dg.AssetSpec:
    """The external asset for the bronze table `spec` reads."""
    location = (
        {"table_name": dg.MetadataValue.text(spec.source)}
        if "source" in spec.table_names
        else {"path": dg.MetadataValue.path(spec.source)}
    )
    spec_of_asset = dg.AssetSpec(
        key=bronze_key(spec),
        group_name=BRONZE_PREFIX,
        kinds={"delta"},
        description=(
            f"Bronze `{spec.bronze_name}`, written outside this platform: the CDF-enabled Delta "
            f"table {spec.source}. Silver reads its change feed; this platform never writes it."
        ),
        metadata={
            **location,
            # The keys a consumer's change batch collapses on (the watermark IO manager).
            "keys": ", ".join(spec.keys),
        },
    )
    # A consumer asset taking bronze as an input loads its changes through this IO manager.
    return spec_of_asset.with_io_manager_key(WATERMARK_IO_MANAGER_KEY)


def external_bronze_assets(
    specs: list[PipelineSpec], written_here: Collection[dg.AssetKey] = ()
) -> list[dg.AssetSpec]:
    """One external asset per bronze table that the specs read, except those `written_here`
    (keys of assets in the same definitions that write them)."""
    seen: dict[dg.AssetKey, dg.AssetSpec] = {}
    for spec in specs:
        key = bronze_key(spec)
        if key not in written_here and key not in seen:
            seen[key] = external_bronze_asset(spec)
    return list(seen.values())
