"""External bronze assets: bronze tables written by other systems (ingestion tools, streaming
jobs, another team's pipelines) that the platform only reads.

A pipeline whose bronze table is not one of the demo sources gets an external asset
`bronze/<bronze_name>`: Dagster shows it in the lineage upstream of silver, but never
materializes it. To point the platform at your own lake, list your tables in the pipelines file:

    pipelines:
      - id: payments
        source: /mnt/landing/payments     # any CDF-enabled Delta table (absolute: as is)
        target: silver/payments
        keys: [payment_id]
        bronze_table: payments            # asset key bronze/payments (default: last path part)
"""

import dagster as dg

from cdf_platform.core.spec import PipelineSpec
from cdf_platform.demo.bronze_assets import BRONZE_PREFIX
from cdf_platform.demo.source import DEMO_KEYS
from cdf_platform.orchestration.silver import bronze_key


def external_bronze_asset(spec: PipelineSpec) -> dg.AssetSpec:
    """The external asset for the bronze table `spec` reads."""
    return dg.AssetSpec(
        key=bronze_key(spec),
        group_name=BRONZE_PREFIX,
        kinds={"delta"},
        description=(
            f"Bronze `{spec.bronze_name}`, written outside this platform: a CDF-enabled Delta "
            f"table at {spec.source}. Silver reads its change feed; this platform never writes it."
        ),
        metadata={"path": dg.MetadataValue.path(spec.source)},
    )


def external_bronze_assets(specs: list[PipelineSpec]) -> list[dg.AssetSpec]:
    """One external asset per bronze table that the specs read and no demo source writes."""
    seen: dict[str, dg.AssetSpec] = {}
    for spec in specs:
        if spec.bronze_name not in DEMO_KEYS and spec.bronze_name not in seen:
            seen[spec.bronze_name] = external_bronze_asset(spec)
    return list(seen.values())
