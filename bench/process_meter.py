"""CPU time and resident memory of process trees, read from `/proc` every half second.

A meter walks the trees below a set of root PIDs (a deployment's services and PostgreSQL, or
one peer process) and keeps, for every process it has seen, its latest CPU time (`utime +
stime` of `/proc/<pid>/stat`, children's waited-for time left out so nothing counts twice).
A `mark()` is those readings at one moment; the CPU spent between two marks is the growth of
each process seen at the later one (a process born in between counts from zero). A process's
last half second before it exits is missed; a long-lived tree (services, a driver JVM) loses
nothing. With `names` (root PID -> a name), each process is also filed under its root's name,
and its descendants under `<name>: children` (the run worker's forked runs, the engine's JVM,
the code server's gRPC server), so `cpu_by_kind` splits the CPU by what spent it.

Example:
    >>> cpu_between({(1, 10): 2.0}, {(1, 10): 5.0, (2, 90): 1.5})
    4.5
    >>> kinds = {(1, 10): "daemon", (2, 90): "run worker: children"}
    >>> cpu_by_kind({(1, 10): 2.0}, {(1, 10): 5.0, (2, 90): 1.5}, kinds)
    {'daemon': 3.0, 'run worker: children': 1.5}
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from cdf_platform_testkit.processes import descendants, process_table

# A process is named by its PID and start time (clock ticks since boot): PIDs are reused.
ProcessKey = tuple[int, int]
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_between(earlier: Mapping[ProcessKey, float], later: Mapping[ProcessKey, float]) -> float:
    """CPU seconds spent between two marks: each process's growth (from zero when born after
    `earlier`)."""
    return sum(max(0.0, seconds - earlier.get(key, 0.0)) for key, seconds in later.items())


def cpu_by_kind(
    earlier: Mapping[ProcessKey, float],
    later: Mapping[ProcessKey, float],
    kinds: Mapping[ProcessKey, str],
) -> dict[str, float]:
    """`cpu_between` per kind of process (`ProcessMeter.kinds`; `other` for a process without
    one), the largest first."""
    spent: dict[str, float] = {}
    for key, seconds in later.items():
        kind = kinds.get(key, "other")
        spent[kind] = spent.get(kind, 0.0) + max(0.0, seconds - earlier.get(key, 0.0))
    return dict(sorted(spent.items(), key=lambda item: -item[1]))


def read_stat(pid: int) -> tuple[ProcessKey, float, int] | None:
    """(key, CPU seconds, resident bytes) of `pid` from /proc (None: gone, or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the name (in parentheses, which may hold spaces): state is the 3rd field.
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    utime, stime, start, rss_pages = (
        int(fields[11]),
        int(fields[12]),
        int(fields[19]),
        int(fields[21]),
    )
    return (pid, start), (utime + stime) / _TICK, rss_pages * _PAGE


class ProcessMeter:
    """A thread sampling the trees below `roots()` every `every` seconds: every process's CPU
    time, and the trees' summed resident memory at its peak since `reset_peak()`."""

    def __init__(
        self,
        roots: Callable[[], Iterable[int]],
        every: float = 0.5,
        names: Callable[[], Mapping[int, str]] | None = None,
    ) -> None:
        self.roots, self.every, self.names = roots, every, names
        self.memory_peak_bytes = 0
        self.samples = 0
        self._cpu: dict[ProcessKey, float] = {}
        self._kinds: dict[ProcessKey, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="process-meter", daemon=True)

    def sample(self) -> None:
        """Read every process of the trees once."""
        table = process_table()
        names = self.names() if self.names is not None else {}
        pids: dict[int, str] = {}
        for root in self.roots():
            if root in table:
                name = names.get(root, "other")
                children = f"{name}: children" if root in names else name
                pids.update({pid: children for pid in descendants(root, table)})
                pids[root] = name
        memory = 0
        readings, kinds = {}, {}
        for pid, kind in pids.items():
            found = read_stat(pid)
            if found is not None:
                key, cpu, rss = found
                readings[key], kinds[key] = cpu, kind
                memory += rss
        with self._lock:
            self._cpu.update(readings)
            self._kinds.update(kinds)
            self.memory_peak_bytes = max(self.memory_peak_bytes, memory)
            self.samples += 1

    def mark(self) -> dict[ProcessKey, float]:
        """Every process's CPU seconds now (a fresh sample; gone processes at their last)."""
        self.sample()
        with self._lock:
            return dict(self._cpu)

    def kinds(self) -> dict[ProcessKey, str]:
        """Every process seen, with its kind (its root's name, or `<name>: children`)."""
        with self._lock:
            return dict(self._kinds)

    def reset_peak(self) -> None:
        with self._lock:
            self.memory_peak_bytes = 0

    def _watch(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def start(self) -> ProcessMeter:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling (a meter never started, its benchmark interrupted before, too: the
        benchmark's own cleanup runs after this)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=10)
