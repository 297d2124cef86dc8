"""Scenarios (d), (f) and (g): `status` and the no-op run through the CLI (is a JVM started?),
and peak memory; the process watch of the latency benchmark (`ProcessWatch`).

Processes are found by scanning `/proc` (no psutil): a JVM started by PySpark is a `java`
descendant of the Python process that launched it. Exited processes not yet reaped by their
parent (zombies) count as gone.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdf_platform_testkit.processes import descendants, parent_and_name, process_table


@dataclass(frozen=True)
class NoopProbe:
    """One no-op CLI run: wall time, exit code, what it reported, and whether java ran."""

    seconds: float
    returncode: int
    mode: str | None
    spark_started: bool | None
    java_seen: bool
    stderr_tail: str


def command_arguments(pid: int) -> list[str]:
    """The command line of `pid` (empty once it has exited)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) process `pid` has used so far; 0.0 once it is
    gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def driver_cpu_seconds(spark: Any) -> float:
    """CPU seconds the driver JVM of local session `spark` (this process's child) has used, all
    its threads."""
    return cpu_seconds(spark.sparkContext._gateway.proc.pid)


def process_start_epoch(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch (10 ms resolution: the kernel
    counts clock ticks since boot); None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    ticks = int(text[text.rindex(")") + 2 :].split()[19])
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return booted + ticks / os.sysconf("SC_CLK_TCK")


class ProcessWatch:
    """Watches the descendants of `root` from a thread, every `interval` seconds, until stopped:
    every process seen (parent, name, start time, when it was last seen alive).

    Example:
        >>> with ProcessWatch(server.pid) as watch:  # doctest: +SKIP
        ...     launch_and_wait()
        >>> watch.java_below(run_pid)  # doctest: +SKIP
        []
    """

    def __init__(self, root: int, interval: float = 0.05) -> None:
        self.root = root
        self.interval = interval
        self.parents: dict[int, int] = {}
        self.names: dict[int, str] = {}
        self.started: dict[int, float | None] = {}
        self.last_seen: dict[int, float] = {}
        self.java_arguments: dict[int, list[str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def scan(self) -> None:
        """Record the descendants of `root` alive now."""
        now = time.time()
        table = process_table()
        for pid, name in descendants(self.root, table).items():
            if pid not in self.started:
                self.started[pid] = process_start_epoch(pid)
            # A process that execs (PySpark's spark-submit script becoming `java`) keeps its
            # pid and changes its name: a `java` name, once seen, is kept.
            if self.names.get(pid) != "java":
                self.names[pid] = name
            if name == "java" and pid not in self.java_arguments:
                self.java_arguments[pid] = command_arguments(pid)
            self.parents[pid] = table[pid][0]
            self.last_seen[pid] = now

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.interval)

    @staticmethod
    def alive(pid: int) -> bool:
        """Whether `pid` is a live process now (a zombie is not)."""
        return parent_and_name(pid) is not None

    def below(self, pid: int) -> list[int]:
        """Every process seen below `pid` while watched (exited ones included)."""
        found: list[int] = []
        frontier = [pid]
        while frontier:
            parent = frontier.pop()
            children = [c for c, p in self.parents.items() if p == parent and c not in found]
            found += children
            frontier += children
        return sorted(found)

    def java_below(self, pid: int | None = None, *, since: float | None = None) -> list[int]:
        """The `java` processes seen below `pid` (default: below `root`); with `since`, only
        those started at or after it (seconds since the epoch)."""
        found = self.below(self.root if pid is None else pid)
        return [
            c
            for c in found
            if self.names[c] == "java"
            and (since is None or (self.started.get(c) or since) >= since)
        ]

    def start(self) -> ProcessWatch:
        """Start watching (in a daemon thread)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, after one last scan."""
        self._stop.set()
        self._thread.join()
        self.scan()

    def __enter__(self) -> ProcessWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def java_descendants(root: int | None = None) -> list[int]:
    """Pids of `java` processes below `root` (default: this process)."""
    found = descendants(os.getpid() if root is None else root)
    return sorted(pid for pid, name in found.items() if name == "java")


def java_free_env() -> dict[str, str]:
    """This environment with no way to find Java: JAVA_HOME points nowhere, PATH has no java."""
    env = dict(os.environ)
    env["JAVA_HOME"] = "/nonexistent-java-home"
    env.pop("SPARK_HOME", None)
    kept = [d for d in env.get("PATH", "").split(os.pathsep) if d and not Path(d, "java").exists()]
    env["PATH"] = os.pathsep.join(kept)
    assert shutil.which("java", path=env["PATH"]) is None
    return env


def cli_via_subprocess(*args: str) -> tuple[float, int, str, str, bool]:
    """`cdf-platform ARGS` in a subprocess that cannot find Java, watched for a JVM child.

    Returns wall seconds, exit code, stdout, stderr and whether a `java` process was seen.
    """
    command = [sys.executable, "-m", "cdf_platform.cli", *args]
    seen: list[int] = []
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=java_free_env(),
    )

    def watch() -> None:
        while process.poll() is None:
            seen.extend(java_descendants(process.pid))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    stdout, stderr = process.communicate(timeout=300)
    seconds = time.perf_counter() - started
    watcher.join()
    return seconds, process.returncode, stdout, stderr, bool(seen)


def noop_via_cli(pipelines: Path, lake_root: Path, control_root: Path) -> NoopProbe:
    """`cdf-platform run bench --json` in a subprocess that cannot find Java, watched for a JVM."""
    seconds, returncode, stdout, stderr, java_seen = cli_via_subprocess(
        "run",
        "bench",
        "--pipelines",
        str(pipelines),
        "--lake-root",
        str(lake_root),
        "--control-root",
        str(control_root),
        "--json",
    )
    report: dict[str, object] = {}
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            report = json.loads(line)
            break
    mode = report.get("mode")
    spark_started = report.get("spark_started")
    return NoopProbe(
        seconds=seconds,
        returncode=returncode,
        mode=str(mode) if mode is not None else None,
        spark_started=bool(spark_started) if spark_started is not None else None,
        java_seen=java_seen,
        stderr_tail="\n".join(stderr.strip().splitlines()[-3:]),
    )


def status_via_cli(pipelines: Path, lake_root: Path) -> float:
    """Seconds of `cdf-platform status --json` in a subprocess that cannot find Java.

    Raises:
        AssertionError: the command failed, printed no status, or started a JVM.
    """
    seconds, returncode, stdout, stderr, java_seen = cli_via_subprocess(
        "status", "--json", "--pipelines", str(pipelines), "--lake-root", str(lake_root)
    )
    assert returncode == 0 and not java_seen, (returncode, java_seen, stderr[-2000:])
    assert json.loads(stdout), stdout
    return seconds


def _status_kib(pid: int, field: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def peak_memory_mib() -> dict[str, float | None]:
    """Peak resident memory of this Python process and of its Spark JVM (VmHWM), in MiB."""
    python_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    jvms = java_descendants()
    jvm_kib = _status_kib(jvms[0], "VmHWM") if jvms else None
    return {
        "python_peak_rss_mib": round(python_kib / 1024, 1),
        "jvm_peak_rss_mib": round(jvm_kib / 1024, 1) if jvm_kib is not None else None,
    }


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU of the machine since boot (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(value) for value in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def wait_for_quiet(
    busy_share: float = 0.10, window: float = 0.5, limit: float = 20.0
) -> tuple[float, float]:
    """Wait until the machine's CPUs were busy at most `busy_share` of a `window` (seconds),
    or `limit` seconds have passed: what the benchmark did just before (a JVM's compiler and
    collector threads after a write) must not run beside the figure timed next.

    Returns:
        (seconds waited, the busy share of the last window).
    """
    started = time.perf_counter()
    while True:
        busy, total = cpu_jiffies()
        time.sleep(window)
        busy_after, total_after = cpu_jiffies()
        share = (busy_after - busy) / max(1, total_after - total)
        waited = time.perf_counter() - started
        if share <= busy_share or waited >= limit:
            return waited, share
