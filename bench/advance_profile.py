"""Where a shared run's advances go: the fleet benchmark's maintenance step, without the
deployment, profiled.

`--pipelines` pipelines (the fleet's: a demo `orders` bronze of 1,000 rows each, silver loaded
beforehand in this process's Spark session, not timed), then an OPTIMIZE ZORDER BY the key and
a VACUUM on every bronze table (`bench.fleet.maintain`, by deltalake: commits that change no
row). Every round copies that lake and advances every pipeline of the copy in one process,
without Spark, two ways:

- `PipelineRunner`: the platform's own run of each pipeline in turn (plan, the silver commit of
  the txn alone, the control tables' rows), no Dagster;
- one shared run of `incremental_job` over every silver asset, executed in this process on a
  Dagster instance of `deploy/dagster.yaml`'s PostgreSQL storage (the kit's PostgreSQL
  server): each pipeline its silver step and its checks step, the run's events stored as the
  deployment's run process stores them (over the connections `PooledPostgresStorage` keeps).

Each way is timed (wall and CPU of this process) in `--rounds` rounds, then run once more
under cProfile: the report gives the cumulative seconds of the parts that matter (the control
tables' reads and writes, tables opened, silver's commit, Dagster's events and connections)
and the functions that took the most time of their own. Results:
`bench/results/advance_profile.{json,md}`.

Usage:
    python -m bench.advance_profile                  # 50 pipelines (a shared run's most), 3 rounds
    python -m bench.advance_profile --pipelines 10 --rounds 1
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import os
import pstats
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pyspark
import yaml

from bench.fleet import INITIAL_ROWS, load_silver, maintain
from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    publish,
    run_info,
    scratch_folder,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_testkit.deployment import DEPLOY
from cdf_platform_testkit.lake import orders_pipeline, write_pipelines
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_testkit.postgres import PostgresServer

RESULTS = Path(__file__).resolve().parent / "results"
# The parts of the profile the report names: (label, file path ending, function name). Their
# cumulative times overlap (a part inside another is counted in both).
PARTS = (
    ("silver steps: the platform's plan (PipelineRunner.prepare)", "run/runner.py", "prepare"),
    ("silver steps: the platform's run (PipelineRunner.finish)", "run/runner.py", "finish"),
    ("  silver's commit of the txn (advance_watermark)", "state/watermark.py", "advance_watermark"),
    ("  the load-log row and the state row (record)", "run/record.py", "record"),
    ("  the control tables missed no commit (repair_control)", "run/record.py", "repair_control"),
    ("control tables: reads (ControlTable.query)", "state/control.py", "query"),
    (
        "control tables: load-log appends (ControlTable._append_rows)",
        "state/control.py",
        "_append_rows",
    ),
    ("control tables: state upserts (ControlTable._upsert)", "state/control.py", "_upsert"),
    (
        "control tables: held rows written (ControlTable.write_held)",
        "state/control.py",
        "write_held",
    ),
    ("deltalake tables opened (DeltaTable.__init__)", "deltalake/table.py", "__init__"),
    ("the run's Dagster times read (orchestrator_times)", "silver_io.py", "orchestrator_times"),
    ("checks steps (the status of each pipeline)", "planning/status.py", "pipeline_status"),
    (
        "checks steps: the control rows they read",
        "orchestration/checks/silver_checks.py",
        "_control_reads",
    ),
    ("Dagster: the run created (with its planned events)", "run_domain.py", "create_run_for_job"),
    ("Dagster: events stored", "event_log/event_log.py", "store_event"),
    (
        "Dagster: connections opened to PostgreSQL",
        "dagster_postgres/utils.py",
        "create_pg_connection",
    ),
)


def build_lake(root: Path, n: int) -> LakeLayout:
    """`n` pipelines under `root`, silver loaded in a local Spark session, then a maintenance
    on every bronze table."""
    from cdf_platform.spark.runtime.session import build_spark_session
    from cdf_platform.spark.runtime.session_conf import SparkSettings

    ids = [f"p{k:03d}" for k in range(1, n + 1)]
    root.mkdir(parents=True, exist_ok=True)
    pipelines_file = write_pipelines(root / "pipelines.yaml", [orders_pipeline(i) for i in ids])
    for pipeline_id in ids:
        write_orders_batch(str(root / "lake" / "bronze" / pipeline_id), batch_size=INITIAL_ROWS)
    lake = LakeLayout(lake_root=str(root / "lake"), pipelines_file=str(pipelines_file))
    spark = build_spark_session(
        SparkSettings(master="local[2]", app_name="cdf_platform_advance", shuffle_partitions=2)
    )
    try:
        load_silver(spark, lake)
    finally:
        spark.stop()
    for pipeline_id in ids:
        maintain(str(root / "lake" / "bronze" / pipeline_id))
    return lake


def copy_of(pristine: Path, to: Path) -> LakeLayout:
    """A copy of the maintained lake at `to` (its pipelines file naming the copy's tables)."""
    shutil.rmtree(to, ignore_errors=True)
    shutil.copytree(pristine / "lake", to / "lake")
    text = (pristine / "pipelines.yaml").read_text()
    (to / "pipelines.yaml").write_text(text)
    return LakeLayout(lake_root=str(to / "lake"), pipelines_file=str(to / "pipelines.yaml"))


def _no_spark() -> Any:
    raise AssertionError("an advance must not start Spark")


def advance_by_runner(lake: LakeLayout) -> None:
    """Every pipeline of `lake` advanced by `PipelineRunner`, one after the other."""
    from cdf_platform.run import PipelineRunner

    bound = lake.bound()
    runner = PipelineRunner.on(bound.control(), _no_spark)
    for spec in bound.specs():
        result = runner.run(spec)
        assert result.mode.value == "advance" and not result.spark_started, result


def advance_in_a_shared_run(lake: LakeLayout, instance: dg.DagsterInstance) -> None:
    """Every pipeline of `lake` advanced by one shared run of `incremental_job`, its silver and
    checks steps executed in this process."""
    from cdf_platform.definitions import build_defs
    from cdf_platform.orchestration.shared.keys import silver_key

    defs = build_defs(lake, SparkResource(master="local[1]"), automation=False)
    job = defs.resolve_job_def("incremental_job")
    keys = [silver_key(spec.id) for spec in lake.specs()]
    result = job.execute_in_process(
        instance=instance, asset_selection=keys, tags=dict(job.tags), raise_on_error=False
    )
    assert result.success, "the shared run failed"
    for key in keys:
        (materialization,) = result.asset_materializations_for_node(key.to_python_identifier())
        assert materialization.metadata["mode"].value == "advance", key


@contextlib.contextmanager
def postgres_instance(home: Path) -> Iterator[dg.DagsterInstance]:
    """A Dagster instance on `deploy/dagster.yaml`'s PostgreSQL storage (a server of the kit),
    as a run process opens it."""
    storage = yaml.safe_load((DEPLOY / "dagster.yaml").read_text())["storage"]
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(
        yaml.safe_dump({"storage": storage, "telemetry": {"enabled": False}})
    )
    with PostgresServer() as postgres:
        saved = dict(os.environ)
        os.environ.update(postgres.dagster_env())
        try:
            instance = dg.DagsterInstance.from_config(str(home))
            try:
                yield instance
            finally:
                instance.dispose()
        finally:
            os.environ.clear()
            os.environ.update(saved)


def timed(action: Callable[[], None]) -> tuple[float, float]:
    """Wall and CPU seconds of `action` in this process."""
    wall, cpu = time.monotonic(), time.process_time()
    action()
    return time.monotonic() - wall, time.process_time() - cpu


def profiled(action: Callable[[], None], top: int) -> dict[str, Any]:
    """`action` under cProfile: the cumulative seconds of each of PARTS and the `top`
    functions by their own time."""
    profile = cProfile.Profile()
    profile.enable()
    action()
    profile.disable()
    stats = pstats.Stats(profile, stream=io.StringIO())
    table: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    parts = []
    for label, file_end, name in PARTS:
        found = [
            (value[1], value[3])
            for (file, _line, function), value in table.items()
            if function == name and file.replace(os.sep, "/").endswith(file_end)
        ]
        if found:
            parts.append(
                {
                    "part": label,
                    "calls": sum(calls for calls, _ in found),
                    "cumulative_s": round(sum(seconds for _, seconds in found), 2),
                }
            )
    own = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:top]
    functions = [
        {
            "function": f"{Path(file).name}:{line}({function})",
            "calls": value[1],
            "own_s": round(value[2], 2),
            "cumulative_s": round(value[3], 2),
        }
        for (file, line, function), value in own
    ]
    return {"total_s": round(stats.total_tt, 2), "parts": parts, "functions": functions}  # type: ignore[attr-defined]


def measure(workdir: Path, pristine: Path, rounds: int, top: int) -> dict[str, dict[str, Any]]:
    """Both ways, `rounds` timed rounds each on a fresh copy of the lake, then one profiled."""
    found: dict[str, dict[str, Any]] = {}
    with postgres_instance(workdir / "dagster_home") as instance:
        ways: dict[str, Callable[[LakeLayout], None]] = {
            "PipelineRunner": advance_by_runner,
            "a shared run": lambda lake: advance_in_a_shared_run(lake, instance),
        }
        for way, advance in ways.items():
            samples = []
            for round_number in range(rounds):
                lake = copy_of(pristine, workdir / f"round_{round_number}")
                samples.append(timed(functools.partial(advance, lake)))
            lake = copy_of(pristine, workdir / "profiled")
            found[way] = {
                "wall_s": statistics.median(wall for wall, _ in samples),
                "cpu_s": statistics.median(cpu for _, cpu in samples),
                "samples": samples,
                "profile": profiled(functools.partial(advance, lake), top),
                "load_average": os.getloadavg()[0],
            }
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=25, help="functions listed by own time")
    parser.add_argument("--stem", default="advance_profile", help="results file name")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    with scratch_folder(args, "cdf-advance-") as workdir:
        pristine = workdir / "pristine"
        build_lake(pristine, args.pipelines)
        loads.append(os.getloadavg()[0])
        found = measure(workdir, pristine, args.rounds, args.top)
    loads += [way["load_average"] for way in found.values()]
    loads.append(os.getloadavg()[0])
    n = args.pipelines
    figures = [
        Figure(
            f"{n} pipelines advanced by {way}, in one process",
            f"{timings['wall_s']:.2f} s ({1000 * timings['wall_s'] / n:.0f} ms a pipeline)",
            "reported",
            None,
            timings["wall_s"],
            f"CPU {timings['cpu_s']:.2f} s; median of {args.rounds} round(s): "
            + ", ".join(f"{wall:.2f} s" for wall, _ in timings["samples"]),
        )
        for way, timings in found.items()
    ]
    tables: dict[str, list[dict[str, Any]]] = {}
    for way, timings in found.items():
        profile = timings["profile"]
        tables[f"{way}, profiled ({profile['total_s']} s under cProfile): parts, cumulative"] = (
            profile["parts"]
        )
        tables[f"{way}, profiled: the {args.top} functions with the most time of their own"] = (
            profile["functions"]
        )
    document = {
        "run": run_info(
            "cdf_platform advance profile",
            f"{n} pipelines, the warm engine's deployment without its processes",
            command_line("bench.advance_profile", argv),
            [
                f"{n} pipelines, bronze {INITIAL_ROWS:,} demo rows each, silver loaded "
                "beforehand, then OPTIMIZE ZORDER BY the key and a VACUUM on every bronze "
                "(deltalake): every pipeline's next run is an advance, without Spark.",
                "Each round advances a fresh copy of that lake in this process: by "
                "`PipelineRunner` alone, and by one shared run of `incremental_job` on "
                "PostgreSQL (deploy/dagster.yaml's storage).",
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": tables,
        "ways": found,
    }
    publish(args.out, args.stem, document)


if __name__ == "__main__":
    main()
