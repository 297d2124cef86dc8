"""Jobs over whole layers: one batch into every demo bronze table, and the gold refresh."""

import dagster as dg

from cdf_platform.demo.data.bronze_assets import demo_bronze_assets

demo_bronze_job = dg.define_asset_job(
    "demo_bronze_job",
    selection=dg.AssetSelection.assets(*demo_bronze_assets),
    description="Commit one deterministic insert/update/delete batch to each demo bronze table "
    "(to the event log, a batch of change events).",
)

gold_job = dg.define_asset_job(
    "gold_job",
    selection=dg.AssetSelection.groups("gold"),
    description="Refresh gold assets incrementally from silver's own change feed, through the "
    "watermark IO manager.",
)
