"""Where a command's CPU goes, by kind of process: the test suite's, typically.

Runs the command, and every `--every` seconds reads every process of the machine from /proc:
its CPU time (`bench.process_meter.read_stat`) and its command line, read again at each
sighting (spark-submit's script execs into `java`, `cdf-platform engine` into the engine's
JVM). Each process is filed under the first kind of `KINDS` whose pattern its command line
matches; a process that was running before the command counts only its growth. Beside them,
the machine's busy and idle CPU from /proc/stat over the same span: what the sampling missed
(processes that lived less than a sample, the kernel) is their difference; the report says
what the sampling itself cost. Writes `bench/results/suite_cpu.{json,md}`.

Usage:
    python -m bench.suite_cpu [--every 1] -- bash .ci/run
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyspark

from bench.probes import command_arguments, cpu_jiffies
from bench.process_meter import ProcessKey, read_stat
from bench.report import Figure, add_output_options, command_line, machine_info, publish, run_info

RESULTS = Path(__file__).resolve().parent / "results"

# (kind, pattern of the command line): the first match names a process.
KINDS: list[tuple[str, str]] = [
    ("JVM: the tests' in-process Spark drivers", r"spark\.app\.name=cdf_platform_tests"),
    ("JVM: Spark Connect servers and engines", r"SparkConnectServer|cdf-platform engine"),
    ("JVM: standalone masters, workers, executors", r"deploy\.(master|worker)|Executor"),
    ("JVM: Hive metastores", r"HiveMetaStore"),
    ("JVM: other drivers (CLI and Dagster runs on local Spark)", r"SparkSubmit|pyspark-shell"),
    ("JVM: other", r"(^|/)java "),
    ("PostgreSQL", r"(^|/)postgres( |$)|^postgres:"),
    ("Chromium", r"(^|/)chromium"),
    ("Node (Azurite, npm)", r"(^|/)(node|npm)( |$)"),
    ("Python: Dagster daemons", r"dagster-daemon"),
    ("Python: Dagster code servers", r"code-server|api grpc"),
    ("Python: Dagster run processes", r"execute_run"),
    ("Python: Dagster webservers", r"dagster-webserver|dagster dev"),
    ("Python: run workers and their runs", r"run-worker|run_worker"),
    ("Python: local S3 servers", r"local_s3"),
    ("Python: test processes (pytest and its workers)", r"(^|/)pytest |exec\(eval\("),
    ("Python: cdf-platform commands", r"cdf-platform|cdf_platform"),
    ("Python: set-up and checks", r"(^|/)(uv|ruff|mypy|mkdocs|lint-imports|pip)( |$)"),
    ("Python: other", r"python"),
]
OTHER = "other processes"
RUNNING_BEFORE = "processes running before the command"


def kind_of(command: str) -> str | None:
    """The kind of the process whose command line is `command` (None: no pattern matches)."""
    for kind, pattern in KINDS:
        if re.search(pattern, command):
            return kind
    return None


def machine_cpu() -> tuple[float, float]:
    """(busy, idle) CPU seconds of the machine since boot (`bench.probes.cpu_jiffies`; idle
    includes I/O wait)."""
    busy, total = cpu_jiffies()
    tick = os.sysconf("SC_CLK_TCK")
    return busy / tick, (total - busy) / tick


class Census:
    """Every process seen: its CPU seconds at its first and latest sighting, and its kind."""

    def __init__(self) -> None:
        self.first: dict[ProcessKey, float] = {}
        self.latest: dict[ProcessKey, float] = {}
        self.kinds: dict[ProcessKey, str] = {}
        self.before: set[ProcessKey] = set()

    def sample(self, *, initial: bool = False) -> None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            found = read_stat(int(entry))
            if found is None:
                continue
            key, cpu, _rss = found
            if initial:
                self.before.add(key)
                self.first[key] = cpu
            self.latest[key] = cpu
            kind = kind_of(" ".join(command_arguments(int(entry))))
            if kind is not None:
                self.kinds[key] = kind
            elif key not in self.kinds:
                self.kinds[key] = RUNNING_BEFORE if key in self.before else OTHER

    def by_kind(self) -> dict[str, tuple[float, int]]:
        """Kind -> (CPU seconds spent while sampled, processes), the largest first."""
        spent: dict[str, tuple[float, int]] = {}
        for key, cpu in self.latest.items():
            grown = cpu - self.first.get(key, 0.0)
            if grown <= 0 and key in self.before:
                continue
            total, count = spent.get(self.kinds[key], (0.0, 0))
            spent[self.kinds[key]] = (total + grown, count + 1)
        return dict(sorted(spent.items(), key=lambda item: -item[1][0]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.suite_cpu", description=__doc__)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    add_output_options(parser, RESULTS)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = [part for part in args.command if part != "--"] or ["bash", ".ci/run"]
    own_before = sum(os.times()[:2])
    census = Census()
    census.sample(initial=True)
    busy0, idle0 = machine_cpu()
    loads = [os.getloadavg()[0]]
    started = time.monotonic()
    process = subprocess.Popen(command)
    while process.poll() is None:
        time.sleep(args.every)
        census.sample()
        loads.append(os.getloadavg()[0])
    busy1, idle1 = machine_cpu()
    wall = time.monotonic() - started
    own = sum(os.times()[:2]) - own_before
    busy, idle = busy1 - busy0, idle1 - idle0
    kinds = census.by_kind()
    sampled = sum(cpu for cpu, _n in kinds.values())
    rows: list[dict[str, Any]] = [
        {
            "kind": kind,
            "CPU s": round(cpu, 1),
            "share of busy": f"{cpu / busy:.1%}" if busy else "-",
            "processes": count,
        }
        for kind, (cpu, count) in kinds.items()
    ]
    rows.append(
        {
            "kind": "not sampled (processes shorter than a sample, the kernel)",
            "CPU s": round(busy - sampled, 1),
            "share of busy": f"{(busy - sampled) / busy:.1%}" if busy else "-",
            "processes": "",
        }
    )
    figures = [
        Figure("wall", f"{wall:.0f} s", "", None, wall, f"exit code {process.returncode}"),
        Figure(
            "machine CPU busy",
            f"{busy:.0f} s",
            "",
            None,
            busy,
            f"idle {idle:.0f} s ({idle / (busy + idle):.0%} of {os.cpu_count()} cores' time); "
            f"the sampling itself {own:.1f} CPU s",
        ),
    ]
    document = {
        "run": run_info(
            "Where a command's CPU goes",
            "suite_cpu",
            command_line("bench.suite_cpu", argv),
            [f"Command measured: `{' '.join(command)}`; a sample every {args.every:g} s."],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {"CPU by kind of process": rows},
    }
    publish(args.out, "suite_cpu", document)
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
