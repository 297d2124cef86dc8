"""Where things live by default: Spark master, lake root, control tables.

Environment variables override the embedded defaults, so the same code runs on a laptop and
against a cluster and object store.
"""

from __future__ import annotations

import os
from pathlib import Path

MASTER_ENV = "CDF_SPARK_MASTER"
LAKE_ROOT_ENV = "CDF_LAKE_ROOT"
CONTROL_ROOT_ENV = "CDF_CONTROL_ROOT"


def default_master() -> str:
    """`$CDF_SPARK_MASTER`, else all local cores."""
    return os.environ.get(MASTER_ENV, "local[*]")


def default_lake_root() -> str:
    """`$CDF_LAKE_ROOT`, else `lake/` under the working directory (the project root when run
    through `dagster dev`, `make` or `cdf-platform`)."""
    return os.environ.get(LAKE_ROOT_ENV) or str(Path.cwd() / "lake")


def default_control_root(lake_root: str) -> str:
    """`$CDF_CONTROL_ROOT`, else `<lake root>/_control`."""
    return os.environ.get(CONTROL_ROOT_ENV) or f"{lake_root.rstrip('/')}/_control"
