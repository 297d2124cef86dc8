"""Where an idle window goes: between two ticks of checks_schedule.

An idle deployment still evaluates its checks every quarter hour (`checks_schedule`: a
checks_job run, about 3 CPU seconds). A window of two minutes holds that run or not depending
on the minute it starts, so its CPU per minute moved by 1.6 with the clock. The benchmarks put
their idle window where it holds no tick and no run of the tick before it, and say so; the
schedule's own cost is its run's CPU over its period.
"""

from __future__ import annotations

import time

from cdf_platform.orchestration.jobs.silver_jobs import CHECKS_EVERY_MINUTES

# A checks_job run after its tick: the tick, the queue, the run (about 10 s here), and margin.
SCHEDULED_RUN_S = 45.0
# The window ends this long before the next tick at the latest (the meter's own reads).
TICK_MARGIN_S = 5.0


def seconds_until_idle_window(minutes: float, now: float) -> float:
    """How long to wait from `now` (epoch seconds) for a window of `minutes` that holds no tick
    of checks_schedule (UTC quarter hours) and begins at least SCHEDULED_RUN_S after the last.

    Example:
        >>> seconds_until_idle_window(2, now=15 * 60 * 1000 + 100)  # 100 s after a tick
        0.0
        >>> seconds_until_idle_window(2, now=15 * 60 * 1000 + 10)  # its run may be going on
        35.0
        >>> seconds_until_idle_window(2, now=15 * 60 * 1000 + 800)  # the next tick is near
        145.0
    """
    period = CHECKS_EVERY_MINUTES * 60.0
    if minutes * 60 > period - SCHEDULED_RUN_S:
        raise ValueError(f"an idle window of {minutes} minutes cannot fit between two ticks")
    since = now % period
    if since < SCHEDULED_RUN_S:
        return SCHEDULED_RUN_S - since
    if since + minutes * 60 <= period - TICK_MARGIN_S:
        return 0.0
    return period - since + SCHEDULED_RUN_S


def wait_for_idle_window(minutes: float) -> float:
    """Sleep until an idle window of `minutes` can begin (`seconds_until_idle_window`); return
    the seconds slept."""
    wait = seconds_until_idle_window(minutes, time.time())
    time.sleep(wait)
    return wait
