"""The project's Definitions: every component under `defs/` (here, the pipelines)."""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    """Loaded by Dagster's tools, not at import."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
