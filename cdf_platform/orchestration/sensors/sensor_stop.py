"""Stopping a sensor so that it stays stopped and is at rest, for the deployments that stop one
and then act on the quiet (the demo's paused consumer, the test kit's and the benchmarks'
deployments), and the sensors' own check that they were not stopped while their tick waited.

A stop only changes the sensor's state. The daemon finishes a tick it began before the stop,
and that tick's run requests still become runs. It may also begin a tick after the stop: it
lists the running sensors at the start of an iteration and submits their ticks to a thread
pool, where a tick can wait seconds behind the other sensors' evaluations and still be created
after the stop. A sensor that requests runs therefore asks `stopped` at the start of its
evaluation and skips when it was stopped: a tick created before the stop returns is either
evaluated to the end (and `at_rest` waits for it) or skips. Whoever stops a sensor to keep
its runs away waits until `at_rest` (then for the runs it requested, as the caller sees fit).

A stop can also be undone. The daemon reads the sensor's state, then writes it back with new
tick data: when a tick starts and again when it ends (dagster/_daemon/sensor.py,
`mark_sensor_state_for_tick` and the tick's end), and a stop written between that read and
that write is overwritten with the RUNNING status read before it. The sensor then runs on as
if never stopped. `stop_sensor` stops a sensor, waits until it is at rest and its stop has
outlasted any such write, and stops it again when one undid it.
"""

from __future__ import annotations

import logging
import time

import dagster as dg
from dagster._core.definitions.selector import InstigatorSelector
from dagster._core.remote_origin import RemoteInstigatorOrigin, RemoteRepositoryOrigin
from dagster._core.remote_representation.external import RemoteSensor
from dagster._core.scheduler.instigation import InstigatorStatus, TickStatus

STOPPED_REASON = "stopped while this tick waited for its turn: nothing requested"
# How long a stop must last, the sensor at rest, before it counts as kept: longer than the
# daemon takes between reading a sensor's state and writing it back (milliseconds, more while
# the instance's storage is busy).
SETTLE_SECONDS = 2.0
POLL_SECONDS = 0.2

logger = logging.getLogger(__name__)


class SensorNotStopped(RuntimeError):
    """A sensor was not stopped and at rest within the time given."""


def at_rest(instance: dg.DagsterInstance, sensor: RemoteSensor) -> bool:
    """Whether no tick of `sensor` is in flight: its newest tick has ended, or it has none."""
    ticks = instance.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id, limit=1)
    return not ticks or ticks[0].status is not TickStatus.STARTED


def is_stopped(instance: dg.DagsterInstance, sensor: RemoteSensor) -> bool:
    """Whether `sensor`'s stored state says STOPPED."""
    state = instance.get_instigator_state(sensor.get_remote_origin_id(), sensor.selector_id)
    return state is not None and state.status is InstigatorStatus.STOPPED


def stop_sensor(
    instance: dg.DagsterInstance,
    sensor: RemoteSensor,
    timeout: float,
    *,
    settle: float = SETTLE_SECONDS,
) -> None:
    """Stop `sensor`, as a user does on its page, and return once it is stopped and at rest and
    has stayed so for `settle` seconds; stop it again each time the daemon's write-back undid
    the stop (logged).

    Raises:
        SensorNotStopped: not stopped and at rest within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        instance.stop_sensor(sensor.get_remote_origin_id(), sensor.selector_id, sensor)
        while not at_rest(instance, sensor) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        time.sleep(settle)
        if is_stopped(instance, sensor) and at_rest(instance, sensor):
            return
        if time.monotonic() >= deadline:
            raise SensorNotStopped(
                f"sensor {sensor.name}: not stopped and at rest within {timeout:.0f} s"
            )
        logger.warning(
            "sensor %s: running again after its stop (the daemon wrote back a state it had "
            "read before the stop); stopping it again",
            sensor.name,
        )


def stopped(context: dg.SensorEvaluationContext, instance: dg.DagsterInstance, name: str) -> bool:
    """Whether sensor `name`, which `context` evaluates, is stopped in `instance` (an operator
    stopped it after the daemon listed it as running). False for an evaluation outside a code
    location (`dg.build_sensor_context` names none) and for a sensor running by default.
    """
    origin, repository = context.code_location_origin, context.repository_name
    if origin is None or repository is None:
        return False
    remote = RemoteInstigatorOrigin(RemoteRepositoryOrigin(origin, repository), name)
    selector = InstigatorSelector(
        location_name=origin.location_name, repository_name=repository, name=name
    )
    state = instance.get_instigator_state(remote.get_id(), selector.get_id())
    return state is not None and state.status is InstigatorStatus.STOPPED
