"""Figures against the issue's targets, the machine they were measured on, and the two result
files (`results.json` for tools, `results.md` for people)."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def median(samples: Sequence[float]) -> float:
    """The median of `samples` (NaN when there are none)."""
    return statistics.median(samples) if samples else float("nan")


@dataclass(frozen=True)
class Figure:
    """One scenario's figure and its target.

    Attributes:
        scenario: What is compared, e.g. "(a) incremental / rebuild".
        measured: The figure as shown in the table.
        target: The target as shown in the table.
        met: Whether the target is met (None: no target).
        value: The figure as a number, for tools.
        detail: The medians behind the figure.
        interval: A ratio's 95% bootstrap interval (None: not a ratio).
    """

    scenario: str
    measured: str
    target: str
    met: bool | None
    value: float | None
    detail: str
    interval: tuple[float, float] | None = None


# Bootstrap resamples behind a ratio's interval; a fixed seed makes a report reproducible.
BOOTSTRAP_ROUNDS = 10_000
BOOTSTRAP_SEED = 20261126


def paired_ratio_interval(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    level: float = 0.95,
    rounds: int = BOOTSTRAP_ROUNDS,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float]:
    """A percentile-bootstrap interval of `median(numerator) / median(denominator)`.

    Sample i of each side was measured in the same round (the repetitions are interleaved), so
    rounds are resampled whole: a round slowed by the machine counts on both sides, as it did.
    With one round the interval is the ratio itself.
    """
    pairs = list(zip(numerator, denominator, strict=False))
    if not pairs:
        return (float("nan"), float("nan"))
    draw = random.Random(seed)
    size = len(pairs)
    ratios = []
    for _ in range(rounds):
        sample = [pairs[draw.randrange(size)] for _ in range(size)]
        bottom = statistics.median(b for _, b in sample)
        ratios.append(statistics.median(a for a, _ in sample) / bottom if bottom > 0 else 0.0)
    ratios.sort()
    tail = (1 - level) / 2
    return ratios[int(tail * rounds)], ratios[min(rounds - 1, int((1 - tail) * rounds))]


def ratio_figure(
    scenario: str,
    numerator: Sequence[float],
    denominator: Sequence[float],
    limit: float | None,
) -> Figure:
    """`median(numerator) / median(denominator)` against `<= limit`, with its paired bootstrap
    95% interval (`paired_ratio_interval`). The target counts as met on the ratio of medians;
    the detail says whether the whole interval is within it. With no `limit` the figure is
    reported only."""
    top, bottom = median(numerator), median(denominator)
    value = top / bottom if bottom > 0 else float("nan")
    low, high = paired_ratio_interval(numerator, denominator)
    detail = (
        f"{top:.2f} s / {bottom:.2f} s (medians of {len(numerator)} and "
        f"{len(denominator)} paired runs); 95% bootstrap interval {low:.2f}-{high:.2f}"
    )
    if limit is None:
        target, met = "(reported)", None
    else:
        target, met = f"<= {limit:g}", bool(value <= limit)
        if high <= limit:
            detail += ": whole interval within the target"
        elif low > limit:
            detail += ": whole interval misses the target"
        else:
            detail += ": interval straddles the target"
    return Figure(
        scenario=scenario,
        measured=f"{value:.2f} [{low:.2f}, {high:.2f}]",
        target=target,
        met=met,
        value=round(value, 4),
        detail=detail,
        interval=(round(low, 4), round(high, 4)),
    )


def _java_version() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else "java"
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return "unknown"
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[0] if lines else "unknown"


def _memory_gib() -> float | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    match = re.search(r"^MemTotal:\s+(\d+) kB", text, re.MULTILINE)
    return round(int(match.group(1)) / 1024**2, 1) if match else None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info(spark_version: str) -> dict[str, Any]:
    """Cores, memory and the versions of everything in the stack."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "memory_gib": _memory_gib(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": _java_version(),
        "spark": spark_version,
        "pyspark": importlib.metadata.version("pyspark"),
        "delta_spark": importlib.metadata.version("delta-spark"),
        "deltalake": importlib.metadata.version("deltalake"),
    }


def summary_rows(samples: Mapping[str, list[float]], prefix: str = "") -> list[dict[str, Any]]:
    """One table row per sample series whose name starts with `prefix` (the prefix left out of
    the name): median, min, max and every sample, in seconds."""
    return [
        {
            "figure": name.removeprefix(prefix),
            "median s": f"{median(values):.3f}",
            "min s": f"{min(values):.3f}",
            "max s": f"{max(values):.3f}",
            "samples s": ", ".join(f"{v:.2f}" for v in values),
        }
        for name, values in samples.items()
        if name.startswith(prefix) and values
    ]


def _met(value: bool | None) -> str:
    return "n/a" if value is None else ("yes" if value else "**no**")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def render_markdown(document: Mapping[str, Any]) -> str:
    """The Markdown report of a results document (as written to results.json)."""
    run, machine = document["run"], document["machine"]
    lines = [f"# {run.get('title', 'cdf_platform benchmark')} ({run['label']})", ""]
    if run["quick"]:
        lines += [
            "> **Smoke run (`--quick`)**: small sizes and few repetitions, to prove every",
            "> scenario runs; not the figures the targets are judged on.",
            "",
        ]
    load = run["load_average"]
    # A benchmark other than bench.run describes its own sizes and settings (`summary`).
    summary = run.get("summary") or [
        f"Bronze: {run['rows']:,} rows ((a): {run['scale_rows']:,}; (e): "
        f"{run.get('large_rows') or run['scale_rows']:,}); backlog: "
        f"{run['changed_keys']:,} changed keys over {run['backlog_commits']} commits; "
        f"{run['reps']} round(s) of (a)-(c) and (e), {run.get('tuning_reps', run['reps'])} of "
        "each tuning variant; medians shown.",
        f"Spark: {run['master']}, driver memory {run['driver_memory']}, conf {run['spark_conf']}.",
    ]
    lines += [
        f"Command: `{run['command']}`  ",
        *(f"{line}  " for line in summary),
        f"Load average (1 min) at start / end: {load['start']:.2f} / {load['end']:.2f} "
        f"(max seen {load['max']:.2f}) on {machine['cores']} cores.  ",
        f"Total wall time: {run['wall_seconds']:.0f} s.",
        "",
        "## Targets",
        "",
    ]
    figures = document["figures"]
    ratios = any(f.get("interval") for f in figures)
    lines += _table(
        [
            "scenario",
            "measured [95% interval]" if ratios else "measured",
            "target",
            "met?",
            "detail",
        ],
        [(f["scenario"], f["measured"], f["target"], _met(f["met"]), f["detail"]) for f in figures],
    )
    lines += ["", "## Machine", ""]
    lines += _table(["item", "value"], [(k, v) for k, v in machine.items()])
    for title, rows in document.get("tables", {}).items():
        if not rows:
            continue
        lines += ["", f"## {title}", ""]
        header = list(dict.fromkeys(key for row in rows for key in row))
        lines += _table(header, [[row.get(key, "") for key in header] for row in rows])
    if document.get("notes"):
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in document["notes"]]
    return "\n".join(lines) + "\n"


def write_results(out: Path, stem: str, document: dict[str, Any]) -> tuple[Path, Path]:
    """Write `<stem>.json` and `<stem>.md` under `out`; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    document = {**document, "figures": [asdict(f) for f in document["figures"]]}
    json_path, md_path = out / f"{stem}.json", out / f"{stem}.md"
    json_path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    md_path.write_text(render_markdown(document))
    return json_path, md_path


def add_output_options(parser: argparse.ArgumentParser, results_dir: Path) -> None:
    """`--out`, `--workdir` and `--keep`, the options every benchmark's command line has."""
    parser.add_argument("--out", type=Path, default=results_dir, help="results folder")
    parser.add_argument("--workdir", type=Path, help="scratch folder (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")


@contextmanager
def scratch_folder(args: argparse.Namespace, prefix: str) -> Iterator[Path]:
    """The run's scratch folder (`--workdir`, else a new temp folder), removed at the end
    unless `--keep`."""
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix=prefix))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        yield workdir
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)


def command_line(module: str, argv: list[str] | None) -> str:
    """How the benchmark was started, for the report (`python -m <module> <arguments>`)."""
    return " ".join([f"python -m {module}", *(sys.argv[1:] if argv is None else argv)])


def run_info(
    title: str,
    label: str,
    command: str,
    summary: list[str],
    loads: list[float],
    started: float,
) -> dict[str, Any]:
    """The `run` section of a benchmark's results that describes its own sizes (`summary`):
    title, label, command line, the load averages seen and the wall time since `started`
    (`time.monotonic()`)."""
    return {
        "title": title,
        "label": label,
        "quick": False,
        "command": command,
        "summary": summary,
        "load_average": {"start": loads[0], "end": loads[-1], "max": max(loads)},
        "wall_seconds": time.monotonic() - started,
    }


def publish(out: Path, stem: str, document: dict[str, Any]) -> None:
    """Write the results (`write_results`) and print the Markdown report and where they are."""
    json_path, md_path = write_results(out, stem, document)
    print(md_path.read_text())
    print(f"wrote {json_path} and {md_path}")
