"""Whether a stopped sensor is at rest, for the deployments that stop one and then act on the
quiet (the demo's paused consumer, the test kit's and the benchmarks' deployments).

A stop only changes the sensor's state: the daemon finishes a tick it began before the stop,
and that tick's run requests still become runs. Whoever stops a sensor to keep its runs away
waits until `at_rest` (then for the runs it requested, as the caller sees fit).
"""

from __future__ import annotations

import dagster as dg
from dagster._core.remote_representation.external import RemoteSensor
from dagster._core.scheduler.instigation import TickStatus


def at_rest(instance: dg.DagsterInstance, sensor: RemoteSensor) -> bool:
    """Whether no tick of `sensor` is in flight: its newest tick has ended, or it has none."""
    ticks = instance.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id, limit=1)
    return not ticks or ticks[0].status is not TickStatus.STARTED
