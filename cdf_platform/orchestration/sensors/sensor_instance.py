"""The instance a sensor's evaluations read, opened once per code-server process.

Dagster hands each sensor evaluation a reference to the daemon's instance, and
`SensorEvaluationContext.instance` opens it anew for every evaluation (each storage's engine
and its check for the tables). At a tick every few seconds that is a share of what an idle
deployment spends (`python -m bench.idle_cost`). `EvaluationInstance` opens the instance of a
reference once and hands it to every later evaluation with the same reference; an evaluation
given an instance rather than a reference (`dg.build_sensor_context(instance=...)`) reads that
one.

`context.log` opens the instance anew too (and a captured log for the tick): `TickLog` opens it
at the first message, so a tick with nothing to say opens nothing.
"""

from __future__ import annotations

import threading

import dagster as dg


class EvaluationInstance:
    """The instance of the evaluations of one sensor, kept between them.

    Example:
        >>> instance = dg.DagsterInstance.ephemeral()
        >>> with dg.build_sensor_context(instance=instance) as context:
        ...     EvaluationInstance().of(context) is instance
        True
    """

    def __init__(self) -> None:
        self._ref: str | None = None  # the serialized reference `_instance` was opened from
        self._instance: dg.DagsterInstance | None = None
        self._lock = threading.Lock()  # the code server evaluates in a thread pool

    def of(self, context: dg.SensorEvaluationContext) -> dg.DagsterInstance:
        """The instance `context` names: the one opened before for the same reference."""
        ref = context.instance_ref
        if ref is None:
            return context.instance
        text = dg.serialize_value(ref)
        with self._lock:
            if self._instance is None or text != self._ref:
                if self._instance is not None:
                    self._instance.dispose()
                self._instance, self._ref = dg.DagsterInstance.from_ref(ref), text
            return self._instance


class TickLog:
    """An evaluation's `context.log`, opened at its first message.

    Example:
        >>> with dg.build_sensor_context() as context:
        ...     TickLog(context).info("%s: caught up", "orders")
    """

    def __init__(self, context: dg.SensorEvaluationContext) -> None:
        self._context = context

    def info(self, msg: str, *args: object) -> None:
        """`context.log.info`."""
        self._context.log.info(msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        """`context.log.warning`."""
        self._context.log.warning(msg, *args)
