"""The newest evaluated execution of asset checks, as the sensors that act on evaluations read
it (`alert_sensor`, `rebuild_sensor`).

Dagster records a check's execution when its run plans it and keeps that record's id when the
run evaluates it; a run that fails before the check runs leaves it planned for good. The
newest execution may therefore have no evaluation: reading only the newest would hide the
evaluation before it (a loss the rebuild sensor must repair), and a position put on a planned
execution would hide its own evaluation once it comes (an alert never told).
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
from dagster._core.storage.asset_check_execution_record import (
    COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES,
    AssetCheckExecutionRecord,
)


def latest_evaluated(
    instance: dg.DagsterInstance, keys: Sequence[dg.AssetCheckKey]
) -> dict[dg.AssetCheckKey, AssetCheckExecutionRecord]:
    """The newest evaluated execution of each check of `keys` that has one: one query for all,
    and for each check whose newest execution is not evaluated, one more."""
    storage = instance.event_log_storage
    latest = dict(storage.get_latest_asset_check_execution_by_key(keys))
    for key, execution in list(latest.items()):
        if execution.status not in COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES:
            del latest[key]
            evaluated = storage.get_asset_check_execution_history(
                key, limit=1, status=set(COMPLETED_ASSET_CHECK_EXECUTION_RECORD_STATUSES)
            )
            if evaluated:
                latest[key] = evaluated[0]
    return latest
