"""What loading the platform's definitions costs a run forked from the warm run worker, with
the worker's definitions built before the fork (`warm_definitions`) and without.

Dagster loads a run's code location in the run's process: for `cdf_platform.definitions` that
is `defs()`, every pipeline's assets, checks, jobs and sensors built and the repository
resolved, then the run's job. The warm run worker forks each run from a process that imported
Dagster and the platform; since `warm_definitions` it also built the definitions, and `defs()`
in the fork returns them while the environment and the pipelines file are the same.

This command writes a pipelines file of `--pipelines` fleet pipelines (`bench.fleet_lake`: 70%
SCD1, 20% SCD2, 10% event logs), imports the definitions module, then `--rounds` times forks a
child that loads them as a run does (`defs()`, the repository, `incremental_job`) and reports
its CPU seconds: first from a parent that never built them, then from one that called
`warm_definitions`. Nothing is written but the pipelines file (a temporary folder) and
`bench/results/definitions_load.{json,md}`.

Usage:
    python -m bench.definitions_load [--pipelines 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyspark
import yaml

from bench.fleet_lake import fleet_ids, fleet_pipeline
from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    publish,
    run_info,
)

RESULTS = Path(__file__).resolve().parent / "results"
JOB = "incremental_job"


def load_in_fork() -> float:
    """The CPU seconds a forked child spends loading the definitions as a run does."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a run's load, then out
        os.close(reader)
        code = 1
        try:
            import cdf_platform.definitions as definitions

            started = time.process_time()
            definitions.defs().get_repository_def().get_job(JOB)
            os.write(writer, json.dumps(time.process_time() - started).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        text = pipe.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not text:
        raise RuntimeError(f"the forked load failed (status {status})")
    return float(json.loads(text))


def measure(pipelines: int, rounds: int, folder: Path) -> dict[str, list[float]]:
    """CPU seconds of `rounds` forked loads, before and after the parent warmed them."""
    spec_file = folder / "pipelines.yaml"
    entries = [fleet_pipeline(pid, kind) for pid, kind in fleet_ids(pipelines).items()]
    spec_file.write_text(yaml.safe_dump({"pipelines": entries}))
    os.environ["CDF_PIPELINES_FILE"] = str(spec_file)
    os.environ["CDF_LAKE_ROOT"] = str(folder / "lake")
    import cdf_platform.definitions as definitions

    cold = [load_in_fork() for _ in range(rounds)]
    if not definitions.warm_definitions():
        raise RuntimeError("the definitions do not load")
    warm = [load_in_fork() for _ in range(rounds)]
    return {"built in the run": cold, "built in the worker": warm}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", type=int, default=100, help="pipelines in the file")
    parser.add_argument("--rounds", type=int, default=5, help="forked loads each way")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    loads = [round(os.getloadavg()[0], 2)]
    with tempfile.TemporaryDirectory(prefix="cdf-definitions-load-") as folder:
        found = measure(args.pipelines, args.rounds, Path(folder))
    loads.append(round(os.getloadavg()[0], 2))
    figures = [
        Figure(
            scenario=f"a forked run's load of the definitions ({args.pipelines} pipelines), {way}",
            measured=f"{statistics.median(samples):.3f} CPU s",
            target="",
            met=None,
            value=statistics.median(samples),
            detail=f"median of {args.rounds}; min {min(samples):.3f}, max {max(samples):.3f}",
        )
        for way, samples in found.items()
    ]
    document: dict[str, Any] = {
        "run": run_info(
            "A forked run's load of the platform's definitions",
            "definitions_load",
            command_line("bench.definitions_load", argv),
            [
                f"{args.pipelines} fleet pipelines; {args.rounds} forked loads each way "
                f"(`defs()`, the repository, `{JOB}`)"
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            "Each load (CPU s)": [
                {"way": way, "load": n + 1, "CPU s": f"{seconds:.3f}"}
                for way, samples in found.items()
                for n, seconds in enumerate(samples)
            ]
        },
        "notes": [
            "CPU: time.process_time() of the forked child, from the load's start to the job.",
        ],
    }
    publish(args.out, "definitions_load", document)


if __name__ == "__main__":
    main()
