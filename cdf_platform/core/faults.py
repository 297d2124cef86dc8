"""Named crash points for fault-injection tests.

Setting `CDF_PLATFORM_FAULT=<point>` makes the process die at that point with `os._exit`, the
way a killed driver dies: no `finally`, no cleanup, no control-table write. A rerun must then
converge to exactly what an uninterrupted run gives.
"""

from __future__ import annotations

import logging
import os
from enum import StrEnum

FAULT_ENV = "CDF_PLATFORM_FAULT"
FAULT_EXIT_CODE = 86

logger = logging.getLogger(__name__)


class FaultPoint(StrEnum):
    """Where a run can be killed."""

    AFTER_READ = "after_read"
    """Change set read and checked, nothing written."""
    AFTER_QUARANTINE = "after_quarantine"
    """The quarantine table written, silver's MERGE not yet committed."""
    AFTER_MERGE = "after_merge"
    """Silver MERGE (with the watermark) committed, nothing else."""
    BEFORE_CONTROL = "before_control"
    """Run metrics gathered, control table not yet written."""
    DURING_REBUILD = "during_rebuild"
    """Snapshot pinned and read, reconcile MERGE not yet committed."""
    BEFORE_CONSUMER_WRITE = "before_consumer_write"
    """A consumer asset computed its output; nothing written (the watermark IO manager)."""


def fault_point(point: FaultPoint) -> None:
    """Die here if `CDF_PLATFORM_FAULT` names this point."""
    if os.environ.get(FAULT_ENV) == point.value:
        logger.error("fault injection: killing the process at %s", point.value)
        logging.shutdown()
        os._exit(FAULT_EXIT_CODE)
