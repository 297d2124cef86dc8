"""A small change set's MERGE with and without generated code, by the size of silver
(`spark.cdf_platform.interpretedMergeMaxBytes`, `cdf_platform.spark.runtime.small_steps`).

One warm session (`local[2]`, Spark's own code generation settings) holds one pipeline per
silver size (`--rows`, demo `orders` rows, loaded first). Each round commits `--changed-keys`
changed keys to every bronze and runs every pipeline once, its MERGE interpreted (the platform's
default below the limit) or with generated code (the limit set to 0), the two alternating round
by round so both meet the same JVM. Per size and way: the median wall time of a run and the
median CPU seconds the driver's JVM spent during it (its compiler threads included), over the
rounds after the first two. The rounds share one JVM, so compiling that one way causes lands
partly in the other's runs: this is what a single run costs each way, not what a driver that
runs only one way saves (`bench.fleet` measures that). Results in
`bench/results/merge_codegen.{json,md}`.

Usage:
    python -m bench.merge_codegen
    python -m bench.merge_codegen --rows 10000000 --stem merge_codegen_10m
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pyspark

from bench.probes import driver_cpu_seconds
from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    publish,
    run_info,
    scratch_folder,
)

RESULTS = Path(__file__).resolve().parent / "results"
WARM_UP_ROUNDS = 2
WAYS = ("interpreted", "generated code")


def measure(workdir: Path, sizes: list[int], changed_keys: int, rounds: int) -> dict[str, Any]:
    """Load a pipeline per size, then `rounds` rounds of changes and runs, ways alternating."""
    from cdf_platform.orchestration.shared.resources import LakeLayout
    from cdf_platform.run import PipelineRunner
    from cdf_platform.spark.runtime.session import build_spark_session
    from cdf_platform.spark.runtime.session_conf import SparkSettings
    from cdf_platform.spark.runtime.small_steps import MERGE_CONF, load_table_state
    from cdf_platform_testkit.lake import orders_pipeline, write_pipelines
    from cdf_platform_testkit.orders_bronze import write_orders_batch

    ids = [f"rows_{n}" for n in sizes]
    pipelines_file = write_pipelines(workdir / "pipelines.yaml", [orders_pipeline(i) for i in ids])
    lake = LakeLayout(lake_root=str(workdir / "lake"), pipelines_file=str(pipelines_file)).bound()
    specs, control = lake.specs(), lake.control()
    spark = build_spark_session(
        SparkSettings(master="local[2]", app_name="cdf_platform_merge_codegen")
    )
    silver_bytes = {}
    for rows, spec in zip(sizes, specs, strict=True):
        write_orders_batch(spec.source, batch_size=rows)
        PipelineRunner.on(control, lambda: spark).run(spec)
        silver_bytes[rows] = load_table_state(spark, spec.target).bytes
    samples: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for round_ in range(rounds):
        way = WAYS[round_ % 2]
        spark.conf.set(MERGE_CONF, "0" if way == "generated code" else str(2**62))
        for rows, spec in zip(sizes, specs, strict=True):
            write_orders_batch(spec.source, batch_size=changed_keys)
            cpu, started = driver_cpu_seconds(spark), time.monotonic()
            result = PipelineRunner.on(control, lambda: spark).run(spec)
            wall, cpu = time.monotonic() - started, driver_cpu_seconds(spark) - cpu
            assert result.mode.value == "incremental", result.mode
            if round_ >= WARM_UP_ROUNDS:
                samples.setdefault((rows, way), []).append((wall, cpu))
    spark.stop()
    return {
        "sizes": [
            {
                "rows": rows,
                "silver_bytes": silver_bytes[rows],
                **{
                    f"{way} {name}": statistics.median(s[i] for s in samples[rows, way])
                    for way in WAYS
                    for i, name in enumerate(("wall_s", "cpu_s"))
                },
                "runs_each": len(samples[rows, WAYS[0]]),
            }
            for rows in sizes
        ]
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1_000, 10_000, 30_000, 100_000, 1_000_000],
        help="silver sizes in rows, comma-separated",
    )
    parser.add_argument("--changed-keys", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--stem", default="merge_codegen", help="results file name")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started, loads = time.monotonic(), [os.getloadavg()[0]]
    with scratch_folder(args, "cdf-merge-codegen-") as workdir:
        found = measure(workdir, args.rows, args.changed_keys, args.rounds)
    loads.append(os.getloadavg()[0])
    figures = [
        Figure(
            f"silver of {s['rows']:,} rows ({s['silver_bytes'] / 2**20:.1f} MiB), "
            f"{args.changed_keys} changed keys: a run, interpreted / with generated code",
            f"{s['interpreted wall_s']:.2f} s / {s['generated code wall_s']:.2f} s",
            "",
            None,
            s["interpreted wall_s"],
            f"driver CPU {s['interpreted cpu_s']:.2f} s / {s['generated code cpu_s']:.2f} s; "
            f"medians of {s['runs_each']} runs each",
        )
        for s in found["sizes"]
    ]
    document = {
        "run": run_info(
            "cdf_platform: a small change set's MERGE with and without generated code",
            f"{args.changed_keys} changed keys",
            command_line("bench.merge_codegen", argv),
            [
                f"One warm session (local[2]), a pipeline per silver size; {args.rounds} rounds "
                f"of {args.changed_keys} changed keys per bronze and one incremental run of "
                "each, the MERGE interpreted and with generated code in alternate rounds; "
                f"medians after the first {WARM_UP_ROUNDS} rounds.",
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            "Medians (seconds)": [
                {
                    "rows": f"{s['rows']:,}",
                    "silver MiB": f"{s['silver_bytes'] / 2**20:.1f}",
                    **{
                        f"{way}: {name}": f"{s[f'{way} {name}_s']:.2f}"
                        for way in WAYS
                        for name in ("wall", "cpu")
                    },
                }
                for s in found["sizes"]
            ]
        },
        **found,
    }
    publish(args.out, args.stem, document)


if __name__ == "__main__":
    main()
