"""Where a pipeline's quarantine table lives under the control root, and its size, JVM-free
(the rows are written by the run's quality gate, `cdf_platform.spark.quality.quality_gate`).

Example:
    >>> quarantine_path("/lake/_control", "orders")
    '/lake/_control/quarantine/orders'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdf_platform.state.control import ControlTable


def quarantine_path(control_root: str, pipeline_id: str) -> str:
    """Where `pipeline_id`'s quarantine table lives under the control root."""
    return f"{control_root.rstrip('/')}/quarantine/{pipeline_id}"


def quarantined_rows(control: ControlTable, pipeline_id: str) -> int | None:
    """How many rows `pipeline_id`'s quarantine holds (None: it has none yet)."""
    found = control.query(quarantine_path(control.root, pipeline_id), "SELECT count(*) AS n FROM t")
    return int(found[0]["n"]) if found else None
