"""Sensors evaluated as a person evaluates them: once, against an instance, with the
definitions' resources, outside a code location."""

from __future__ import annotations

from typing import Any

import dagster as dg


def sensor_tick(
    defs: dg.Definitions, instance: dg.DagsterInstance, name: str, cursor: str | None = None
) -> Any:
    """One evaluation of the definitions' sensor `name` against `instance`, with its resources,
    outside a code location (as a person evaluates it)."""
    sensor = defs.resolve_sensor_def(name)
    resources = {key: (defs.resources or {})[key] for key in sensor.required_resource_keys}
    with dg.build_sensor_context(
        definitions=defs, resources=resources, instance=instance, cursor=cursor
    ) as context:
        return sensor(context)


def incremental_tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> Any:
    """One evaluation of the real incremental sensor against `instance`."""
    return sensor_tick(defs, instance, "incremental_sensor")
