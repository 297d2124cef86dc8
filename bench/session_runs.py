"""What a fleet's pipelines cost inside warm Spark sessions, without Dagster: the lower bound of
the fleet benchmark's catch-up on this machine.

Each session (a process of its own, `local[2]`) loads `--pipelines` pipelines (the fleet
benchmark's bronze: 1,000 demo `orders` rows), which warms its JVM, commits `--changed-keys`
changed keys to every bronze, then runs every pipeline once (`run_pipeline`, incremental) and
times the runs; `--rounds N` does that N times (a steady state: the JVM's compiler settles
over minutes, not over the first runs). `--sessions 2` runs two such sessions at once, as the
fleet's two drivers do. `--conf KEY=VALUE` sets Spark conf on the sessions (an A/B of a
setting on the same runs). `--bronze-writer` says who commits the changes to bronze
(`BRONZE_WRITERS`): the test kit's deltalake batches, which leave no checksum file in bronze's
log, or Spark UPDATEs, with Delta's checksum files or with them deleted. Results in
`bench/results/session_runs.{json,md}`: seconds a pipeline (the timed runs' wall time over
their number) per session, the CPU seconds the session's JVM and its Python process spent per
timed run, the medians of the runs' own step timings, and of the Spark jobs a run starts: how
many, the seconds inside them (Spark's status store) and the rest of the run's time (the
driver's planning, commits and Python), and the jobs of the last timed run by Spark's
description.

Usage:
    python -m bench.session_runs                   # one session, 20 pipelines x 100 keys
    python -m bench.session_runs --sessions 2
    python -m bench.session_runs --pipelines 8 --changed-keys 50 --rounds 15
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyspark

from bench.probes import cpu_seconds, driver_cpu_seconds
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
INITIAL_ROWS = 1_000
# The runs timed after this many (the first ones still compile the MERGE's code paths).
WARM_UP = 3
# Who commits a round's changes to bronze: deltalake (the test kit's `orders` batches: updates,
# inserts and deletes; no checksum files in the log, as delta-rs writes none), Spark (an UPDATE
# of `--changed-keys` rows; Delta's checksum file beside each commit), or Spark with the
# checksum files deleted after each commit (a writer that writes none, on the same changes).
BRONZE_WRITERS = ("deltalake", "spark", "spark-without-checksums")


def one_session(
    workdir: Path,
    pipelines: int,
    changed_keys: int,
    rounds: int = 1,
    conf: dict[str, str] | None = None,
    warm_up: int = WARM_UP,
    bronze_writer: str = "deltalake",
) -> dict[str, Any]:
    """Load, then `rounds` incremental runs of each pipeline (`changed_keys` written to every
    bronze before each round, by `bronze_writer`: one of BRONZE_WRITERS), in this process's
    session (with Spark conf `conf`); the runs after the first `warm_up` are timed."""
    from cdf_platform.orchestration.shared.resources import LakeLayout
    from cdf_platform.run import PipelineRunner
    from cdf_platform.spark.runtime.session import build_spark_session
    from cdf_platform.spark.runtime.session_conf import SparkSettings
    from cdf_platform_testkit.lake import orders_pipeline, write_pipelines
    from cdf_platform_testkit.orders_bronze import write_orders_batch

    ids = [f"s{k:03d}" for k in range(1, pipelines + 1)]
    workdir.mkdir(parents=True, exist_ok=True)
    pipelines_file = write_pipelines(workdir / "pipelines.yaml", [orders_pipeline(i) for i in ids])
    lake = LakeLayout(lake_root=str(workdir / "lake"), pipelines_file=str(pipelines_file)).bound()
    specs, control = lake.specs(), lake.control()
    spark = build_spark_session(
        SparkSettings(
            master="local[2]", app_name="cdf_platform_session_runs", extra_conf=dict(conf or {})
        )
    )
    for spec in specs:
        write_orders_batch(spec.source, batch_size=INITIAL_ROWS)
        PipelineRunner.on(control, lambda: spark).run(spec)
    results, jobs, seconds = [], [], 0.0
    cpu = {"jvm": 0.0, "python": 0.0}
    for round_number in range(rounds):
        for spec in specs:
            _change_bronze(spark, spec.source, bronze_writer, changed_keys, round_number)
        known = _job_ids(spark)
        for spec in specs:
            before = driver_cpu_seconds(spark), cpu_seconds(os.getpid())
            started = time.monotonic()
            results.append(PipelineRunner.on(control, lambda: spark).run(spec))
            elapsed = time.monotonic() - started
            after = driver_cpu_seconds(spark), cpu_seconds(os.getpid())
            if len(results) > warm_up:
                seconds += elapsed
                cpu["jvm"] += after[0] - before[0]
                cpu["python"] += after[1] - before[1]
            # Read between runs, outside the timed seconds.
            found = _job_ids(spark) - known
            jobs.append(_job_seconds(spark, found))
            known |= found
    last_jobs = _job_descriptions(spark, set(jobs[-1]))
    spark.stop()
    timed = results[warm_up:]
    steps = sorted({name for r in timed for name in r.timings})
    in_jobs = [sum(found.values()) for found in jobs[warm_up:]]
    return {
        "pipelines": pipelines,
        "rounds": rounds,
        "timed_runs": len(timed),
        "seconds": seconds,
        "seconds_a_pipeline": seconds / len(timed),
        "cpu_seconds_a_run": {part: spent / len(timed) for part, spent in cpu.items()},
        "last_run_jobs": last_jobs,
        "modes": sorted({r.mode.value for r in results}),
        "step_medians_s": {
            name: statistics.median(r.timings.get(name, 0.0) for r in timed) for name in steps
        },
        "spark_jobs": {
            "jobs a run": statistics.median(len(found) for found in jobs[warm_up:]),
            "seconds in Spark jobs": statistics.median(in_jobs),
            "seconds of the run outside them": statistics.median(
                r.duration_seconds - inside for r, inside in zip(timed, in_jobs, strict=True)
            ),
        },
    }


def _change_bronze(
    spark: Any, bronze: str, writer: str, changed_keys: int, round_number: int
) -> None:
    """`changed_keys` changes committed to the `orders` bronze table at `bronze` by `writer`
    (BRONZE_WRITERS)."""
    from cdf_platform_testkit.orders_bronze import write_orders_batch

    if writer == "deltalake":
        write_orders_batch(bronze, batch_size=changed_keys)
        return
    # Every `every`-th key of the initial batch's 1..INITIAL_ROWS, a different set each round.
    every = max(1, INITIAL_ROWS // changed_keys)
    spark.sql(
        f"UPDATE delta.`{bronze}` SET amount = amount + 1 "
        f"WHERE order_id % {every} = {round_number % every}"
    )
    if writer == "spark-without-checksums":
        for checksum in Path(bronze, "_delta_log").glob("*.crc"):
            checksum.unlink()


def _session_result(process: subprocess.Popen[str]) -> dict[str, Any]:
    """The figures a session process printed last.

    Raises:
        SystemExit: the session failed; its error output's last lines say why.
    """
    out, err = process.communicate()
    lines = out.splitlines()
    if process.returncode != 0 or not lines:
        tail = "\n".join(err.strip().splitlines()[-15:])
        raise SystemExit(f"a session failed (exit {process.returncode}):\n{tail}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def _conf_pairs(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, str]:
    """`--conf KEY=VALUE` options as a dict (a usage error names a pair without `=`)."""
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            parser.error(f"--conf takes KEY=VALUE, got {pair!r}")
        conf[key.strip()] = value.strip()
    return conf


def _job_descriptions(spark: Any, ids: set[int]) -> list[str]:
    """Jobs `ids` of `spark`'s context as Spark's UI names them (their description, else their
    call site), with their task counts, in the order they ran."""
    store = spark.sparkContext._jsc.sc().statusStore()
    named = []
    for job_id in sorted(ids):
        job = store.job(job_id)
        text = job.description().get() if job.description().isDefined() else job.name()
        named.append(f"{' '.join(str(text).split())[:120]} ({job.numTasks()} tasks)")
    return named


def _job_ids(spark: Any) -> set[int]:
    """The ids of every Spark job `spark`'s context has started."""
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def _job_seconds(spark: Any, ids: set[int]) -> dict[int, float]:
    """Jobs `ids` of `spark`'s context: id -> seconds from submission to completion (Spark's
    status store, as its UI shows them)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    found = {}
    for job_id in ids:
        job = store.job(job_id)
        submitted, completed = job.submissionTime(), job.completionTime()
        if submitted.isDefined() and completed.isDefined():
            found[job_id] = (completed.get().getTime() - submitted.get().getTime()) / 1000
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, default=20, help="pipelines per session")
    parser.add_argument("--changed-keys", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=1, choices=(1, 2))
    parser.add_argument("--rounds", type=int, default=1, help="runs of each pipeline (1)")
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP, help=f"runs not timed, first ({WARM_UP})"
    )
    parser.add_argument(
        "--bronze-writer",
        choices=BRONZE_WRITERS,
        default=BRONZE_WRITERS[0],
        help="who commits each round's changes to bronze (deltalake)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark conf for the sessions (repeatable)",
    )
    parser.add_argument("--stem", default="session_runs", help="results file name")
    parser.add_argument("--session-dir", type=Path, help=argparse.SUPPRESS)  # one session
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    conf = _conf_pairs(parser, args.conf)
    if args.rounds * args.pipelines <= args.warm_up:
        parser.error(f"--rounds x --pipelines must exceed --warm-up ({args.warm_up}): no run timed")
    started, loads = time.monotonic(), [os.getloadavg()[0]]
    if args.session_dir is not None:
        session = one_session(
            args.session_dir,
            args.pipelines,
            args.changed_keys,
            args.rounds,
            conf,
            args.warm_up,
            args.bronze_writer,
        )
        print(json.dumps(session))
        return
    with scratch_folder(args, "cdf-session-runs-") as workdir:
        command = [
            sys.executable,
            "-m",
            "bench.session_runs",
            "--pipelines",
            str(args.pipelines),
            "--changed-keys",
            str(args.changed_keys),
            "--rounds",
            str(args.rounds),
            "--warm-up",
            str(args.warm_up),
            "--bronze-writer",
            args.bronze_writer,
            *(f"--conf={pair}" for pair in args.conf),
        ]
        processes = [
            subprocess.Popen(
                [*command, "--session-dir", str(workdir / f"session{n}")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for n in range(args.sessions)
        ]
        sessions = [_session_result(process) for process in processes]
    loads.append(os.getloadavg()[0])
    figures = [
        Figure(
            f"session {n + 1} of {args.sessions}: {s['pipelines']} pipelines x "
            f"{args.changed_keys} changed keys, incremental runs",
            f"{s['seconds_a_pipeline']:.2f} s a pipeline",
            "",
            None,
            s["seconds_a_pipeline"],
            f"{s['timed_runs']} runs timed, {s['seconds']:.1f} s in all; CPU a run: the JVM "
            f"{s['cpu_seconds_a_run']['jvm']:.2f} s, Python {s['cpu_seconds_a_run']['python']:.2f}"
            f" s; modes {', '.join(s['modes'])}",
        )
        for n, s in enumerate(sessions)
    ]
    steps = sorted({name for s in sessions for name in s["step_medians_s"]})
    document = {
        "run": run_info(
            "cdf_platform runs in warm sessions",
            f"{args.sessions} session(s) at once",
            command_line("bench.session_runs", argv),
            [
                f"Each session: {args.pipelines} pipelines, bronze {INITIAL_ROWS:,} rows each, "
                f"silver loaded (warming the JVM), then {args.rounds} round(s) of "
                f"{args.changed_keys} changed keys per bronze (committed by "
                f"{args.bronze_writer}) and an incremental run of each; "
                f"the runs after the first {args.warm_up} timed; local[2]"
                + (f"; conf {', '.join(args.conf)}." if args.conf else "."),
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            f"Step medians after the first {args.warm_up} runs (seconds)": [
                {"step": name}
                | {
                    f"session {n + 1}": f"{s['step_medians_s'].get(name, 0.0):.3f}"
                    for n, s in enumerate(sessions)
                }
                for name in steps
            ],
            f"Spark jobs of a run, medians after the first {args.warm_up} runs": [
                {"figure": name}
                | {
                    f"session {n + 1}": f"{s['spark_jobs'][name]:.3g}"
                    for n, s in enumerate(sessions)
                }
                for name in sessions[0]["spark_jobs"]
            ],
            "The Spark jobs of session 1's last run": [
                {"job": name} for name in sessions[0]["last_run_jobs"]
            ],
        },
        "sessions": sessions,
    }
    publish(args.out, args.stem, document)


if __name__ == "__main__":
    main()
