"""Whether a stopped sensor is at rest, for the deployments that stop one and then act on the
quiet (the demo's paused consumer, the test kit's and the benchmarks' deployments), and the
sensors' own check that they were not stopped while their tick waited.

A stop only changes the sensor's state. The daemon finishes a tick it began before the stop,
and that tick's run requests still become runs. It may also begin a tick after the stop: it
lists the running sensors at the start of an iteration and submits their ticks to a thread
pool, where a tick can wait seconds behind the other sensors' evaluations and still be created
after the stop. A sensor that requests runs therefore asks `stopped` at the start of its
evaluation and skips when it was stopped: a tick created before the stop returns is either
evaluated to the end (and `at_rest` waits for it) or skips. Whoever stops a sensor to keep
its runs away waits until `at_rest` (then for the runs it requested, as the caller sees fit).
"""

from __future__ import annotations

import dagster as dg
from dagster._core.definitions.selector import InstigatorSelector
from dagster._core.remote_origin import RemoteInstigatorOrigin, RemoteRepositoryOrigin
from dagster._core.remote_representation.external import RemoteSensor
from dagster._core.scheduler.instigation import InstigatorStatus, TickStatus

STOPPED_REASON = "stopped while this tick waited for its turn: nothing requested"


def at_rest(instance: dg.DagsterInstance, sensor: RemoteSensor) -> bool:
    """Whether no tick of `sensor` is in flight: its newest tick has ended, or it has none."""
    ticks = instance.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id, limit=1)
    return not ticks or ticks[0].status is not TickStatus.STARTED


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
