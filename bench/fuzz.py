"""Run many generated bronze histories against the snapshot oracle, outside CI.

Writes figures (histories, operations, consumer runs, modes, divergences, lost windows actual /
detected / silent, spurious rebuilds) to `bench/results/fuzz.json`, rewritten after every
history so an interrupted run still leaves its figures; `--resume` continues such a file.

Usage:
    python -m bench.fuzz --seeds 300              # seeds 1000..1299, fuzz profile
    python -m bench.fuzz --seeds 300 --resume     # skip the seeds the file already holds
    python -m bench.fuzz --seed 7 --seed 11 --profile ci --out /tmp/fuzz.json
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from cdf_platform_testkit.faults.harness import HistoryHarness
from cdf_platform_testkit.faults.history import CI_PROFILE, FUZZ_PROFILE, HistoryProfile

RESULTS = Path(__file__).parent / "results" / "fuzz.json"
PROFILES = {"ci": CI_PROFILE, "fuzz": FUZZ_PROFILE}
# Harness errors in a row after which the Spark session is assumed broken.
MAX_CONSECUTIVE_ERRORS = 3


def summarize(histories: list[dict[str, Any]], profile: HistoryProfile) -> dict[str, Any]:
    """Totals over per-history figures (`HistoryReport.as_dict()` rows)."""
    modes: Counter[str] = Counter()
    incidents: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    operations: Counter[str] = Counter()
    for history in histories:
        modes.update(history["modes"])
        incidents.update(history["incidents"])
        reasons.update(history["loss_reasons"])
        operations.update(op.split("@")[0] for op in history["operations"])
    return {
        "histories": len(histories),
        "profile": {"operations": profile.operations, "runs": list(profile.runs)},
        "operations": sum(len(h["operations"]) for h in histories),
        "operations_by_kind": dict(sorted(operations.items())),
        "consumer_runs": sum(h["runs"] for h in histories),
        "modes": dict(modes),
        "incidents": dict(incidents),
        "lost_windows_actual": sum(h["actual_losses"] for h in histories),
        "lost_windows_detected": sum(h["detected_losses"] for h in histories),
        "lost_window_reasons": dict(reasons),
        "silent_losses": sum(h["silent_losses"] for h in histories),
        "spurious_rebuilds": sum(h["spurious_rebuilds"] for h in histories),
        "divergences": sum(len(h["divergences"]) for h in histories),
        "diverging_seeds": [h["seed"] for h in histories if h["divergences"]],
        "harness_errors": sum(1 for h in histories if h.get("error")),
        "seconds": round(sum(h["seconds"] for h in histories), 1),
    }


def _revision() -> str | None:
    """The checked-out commit of the project, when it is a git clone."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except OSError:
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _run_one(spark: SparkSession, lake: Path, seed: int, profile: HistoryProfile) -> dict[str, Any]:
    """One history's figures; an exception the harness does not classify (a broken Spark
    session, say) is recorded as `error` instead of ending the whole run."""
    harness = HistoryHarness(spark, lake, seed, profile)
    try:
        return harness.run().as_dict()
    except Exception:
        figures = harness.report.as_dict()
        figures["error"] = traceback.format_exc(limit=3)[-2000:]
        return figures


def run_seeds(
    spark: SparkSession,
    workdir: Path,
    seeds: Iterable[int],
    profile: HistoryProfile = FUZZ_PROFILE,
    out: Path | None = None,
    previous: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run one history per seed (each in its own lake under `workdir`) after `previous` ones;
    return the summary, and write it with the per-history figures to `out` after each one."""
    histories = list(previous or [])
    started = datetime.now(UTC).isoformat(timespec="seconds")
    revision = _revision()
    errors_in_a_row = 0
    for seed in seeds:
        lake = workdir / f"seed-{seed}"
        lake.mkdir(parents=True)
        figures = _run_one(spark, lake, seed, profile)
        histories.append(figures)
        shutil.rmtree(lake, ignore_errors=True)
        status = "ok"
        if figures.get("error"):
            status = "HARNESS ERROR " + figures["error"].strip().splitlines()[-1]
        elif figures["divergences"]:
            status = "DIVERGED " + figures["divergences"][0]
        print(
            f"seed {seed}: {len(figures['operations'])} ops, {figures['runs']} runs, "
            f"lost {figures['actual_losses']}/{figures['detected_losses']} detected, "
            f"{figures['seconds']:.1f}s: {status}",
            flush=True,
        )
        if out is not None:
            out.parent.mkdir(parents=True, exist_ok=True)
            document = {
                "command": " ".join(["python -m bench.fuzz", *sys.argv[1:]]),
                "started_at": started,
                "revision": revision,
                "summary": summarize(histories, profile),
                "histories": histories,
            }
            out.write_text(json.dumps(document, indent=2) + "\n")
        errors_in_a_row = errors_in_a_row + 1 if figures.get("error") else 0
        if errors_in_a_row >= MAX_CONSECUTIVE_ERRORS:
            print("stopping: the Spark session looks broken", flush=True)
            break
    return summarize(histories, profile)


def _spark() -> SparkSession:
    from cdf_platform.orchestration.shared.spark_resource import SparkResource
    from cdf_platform_testkit.spark_conf import TEST_SPARK_CONF

    warehouse = tempfile.mkdtemp(prefix="fuzz-warehouse-")
    return SparkResource(
        master="local[2]",
        app_name="cdf_platform_fuzz",
        shuffle_partitions=2,
        driver_memory="2g",
        spark_config={**TEST_SPARK_CONF, "spark.sql.warehouse.dir": warehouse},
    ).spark_session


def _previous(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    histories: list[dict[str, Any]] = json.loads(out.read_text())["histories"]
    # A history cut short by a harness error is run again.
    return [h for h in histories if not h.get("error")]


def main() -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300, help="number of histories")
    parser.add_argument("--first", type=int, default=1000, help="first seed")
    parser.add_argument("--seed", type=int, action="append", help="run only these seeds")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="fuzz")
    parser.add_argument("--out", type=Path, default=RESULTS, help="figures file")
    parser.add_argument("--resume", action="store_true", help="continue the figures file")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    started = time.monotonic()
    previous = _previous(args.out) if args.resume else []
    done = {h["seed"] for h in previous}
    seeds = [s for s in args.seed or range(args.first, args.first + args.seeds) if s not in done]
    spark = _spark()
    workdir = Path(tempfile.mkdtemp(prefix="cdf-fuzz-"))
    try:
        summary = run_seeds(spark, workdir, seeds, PROFILES[args.profile], args.out, previous)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(summary, indent=2))
    print(f"wall time {time.monotonic() - started:.0f}s")
    clean = summary["divergences"] == summary["silent_losses"] == summary["harness_errors"] == 0
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
