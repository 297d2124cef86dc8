"""The end-to-end demo driven through the real Dagster definitions."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg

from cdf_platform.definitions import defs

logger = logging.getLogger(__name__)


def run_demo(*, dagster_home: Path, batch_size: int) -> int:
    """Materialize every asset of the definitions twice on the local instance; return 0 on
    success."""
    instance = dg.DagsterInstance.get()
    assets = list(defs.assets or [])
    resources = dict(defs.resources or {})
    for round_index in range(2):
        result = dg.materialize(
            assets,  # type: ignore[arg-type]
            resources=resources,
            instance=instance,
            run_config={
                "ops": {
                    key.to_python_identifier(): {"config": {"batch_size": batch_size}}
                    for key in defs.resolve_asset_graph().get_all_asset_keys()
                }
            },
        )
        if not result.success:
            return 1
        logger.info("demo round %d materialized %d assets", round_index + 1, len(assets))
    logger.info("Browse the runs: DAGSTER_HOME=%s dagster dev -w workspace.yaml", dagster_home)
    return 0
