"""`verify` of an unchanged silver against a snapshot rebuild of the same tables.

One session (`local[2]`, the main benchmark's settings), one pipeline per size (`--rows`, the
main benchmark's bronze: N keys, six columns, CDF on), silver loaded by the platform. Each
round times `verify_pipeline` (compare only: nothing to repair) and
`PipelineRunner.run(force_rebuild=True)` on the same tables, in alternating order; the ratio of
the medians comes with a paired bootstrap 95% interval (`bench.report.ratio_figure`). Each
verification must find silver EQUAL and leave silver's version where it was (asserted: a
verification of an unchanged silver commits nothing). Results in
`bench/results/verify.{json,md}`.

Usage:
    python -m bench.verify --rows 1000000
    python -m bench.verify --rows 1000000 --rows 16000000 --reps 3
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import pyspark
from deltalake import DeltaTable

from bench.harness import SESSION_CONF
from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    publish,
    ratio_figure,
    run_info,
    scratch_folder,
)

RESULTS = Path(__file__).resolve().parent / "results"
TARGET = 0.5
"""verify / rebuild: a verification costs at most half a rebuild."""


def _measure_size(spark: Any, root: Path, rows: int, reps: int) -> dict[str, Any]:
    """Bronze of `rows` keys and its loaded silver under `root`, then `reps` rounds of a
    verification and a rebuild, alternating which goes first."""
    from bench.workload import spec_for, write_bronze
    from cdf_platform.run import PipelineRunner
    from cdf_platform.run.verify import verify_pipeline
    from cdf_platform.state.control import ControlTable

    bronze = str(root / "bronze")
    started = time.monotonic()
    write_bronze(spark, bronze, rows)
    spec, control = spec_for(bronze, root / "silver"), ControlTable(str(root / "_control"))
    runner = PipelineRunner.on(control, lambda: spark)
    runner.run(spec)
    build = time.monotonic() - started

    def verify() -> float:
        before = DeltaTable(spec.target).version()
        began = time.perf_counter()
        result = verify_pipeline(spec, control, lambda: spark)
        seconds = time.perf_counter() - began
        assert result.verification.outcome.value == "EQUAL", result.as_metadata()
        assert DeltaTable(spec.target).version() == before, "verify committed to silver"
        return seconds

    def rebuild() -> float:
        began = time.perf_counter()
        result = runner.run(spec, force_rebuild=True)
        assert result.mode.value == "rebuild", result.mode
        return time.perf_counter() - began

    verify(), rebuild()  # warm-up: the first of each compiles and caches table state
    samples: dict[str, list[float]] = {"verify": [], "rebuild": []}
    for round_ in range(reps):
        order = (("verify", verify), ("rebuild", rebuild))
        for name, timed in order if round_ % 2 == 0 else reversed(order):
            samples[name].append(timed())
    return {"rows": rows, "build_seconds": build, "samples": samples}


def measure(workdir: Path, sizes: list[int], reps: int) -> list[dict[str, Any]]:
    """Every size's samples (`_measure_size`), in one session."""
    from cdf_platform.spark.runtime.session import build_spark_session
    from cdf_platform.spark.runtime.session_conf import SparkSettings

    spark = build_spark_session(
        SparkSettings(
            master="local[2]",
            app_name="cdf_platform_verify",
            shuffle_partitions=2,
            driver_memory="8g",
            extra_conf=SESSION_CONF,
        )
    )
    try:
        return [_measure_size(spark, workdir / f"rows_{rows}", rows, reps) for rows in sizes]
    finally:
        spark.stop()


def _figure(size: dict[str, Any]) -> Figure:
    samples = size["samples"]
    figure = ratio_figure(
        f"verify / snapshot rebuild of an unchanged silver, {size['rows']:,} rows",
        samples["verify"],
        samples["rebuild"],
        TARGET,
    )
    return figure


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, action="append", help="bronze keys (repeatable; default 1,000,000)"
    )
    parser.add_argument("--reps", type=int, default=5, help="timed rounds per size")
    parser.add_argument("--stem", default="verify", help="results file name")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    sizes = args.rows or [1_000_000]
    started, loads = time.monotonic(), [os.getloadavg()[0]]
    with scratch_folder(args, "cdf-verify-") as workdir:
        found = measure(workdir, sizes, args.reps)
    loads.append(os.getloadavg()[0])
    document = {
        "run": run_info(
            "cdf_platform: verify of an unchanged silver against a snapshot rebuild",
            ", ".join(f"{rows:,} rows" for rows in sizes),
            command_line("bench.verify", argv),
            [
                "One session (local[2], 2 shuffle partitions), one pipeline per size (bronze of "
                "N keys and six columns, silver loaded by the platform); after one untimed "
                f"warm-up of each, {args.reps} rounds of a verification (compare only) and a "
                "rebuild (force_rebuild) of the same tables, alternating which goes first. "
                "Every verification found silver EQUAL and left its version unchanged.",
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": [_figure(size) for size in found],
        "tables": {
            "Samples (seconds)": [
                {
                    "rows": f"{size['rows']:,}",
                    "build s": f"{size['build_seconds']:.1f}",
                    **{
                        name: ", ".join(f"{s:.2f}" for s in samples)
                        for name, samples in size["samples"].items()
                    },
                }
                for size in found
            ]
        },
        "sizes": found,
    }
    publish(args.out, args.stem, document)


if __name__ == "__main__":
    main()
