"""A platform team's fleet: many pipelines, each with a small backlog, caught up by the sensors.

Two parts, written to `bench/results/fleet.{json,md}`:

- Catch-up (`--pipelines`, 100 by default): one demo `orders` bronze table per pipeline, each
  silver loaded by the deployment of the system tests (`deploy/dagster.yaml` on PostgreSQL,
  the warm engine, the code server, the daemon with the run queue, the webserver; `--cold`: no
  engine, each run starts a local Spark driver), then a backlog of `--changed-keys` changed
  keys (60% updates, 30% inserts, 10% deletes) committed to every bronze table while the
  incremental sensor is stopped, which the deployment catches up on its own once the sensor is
  started again: measured from the first run the sensors create after the backlog to every
  silver at its bronze's latest version: wall time, runs, Spark JVMs
  started (every `java` process running SparkSubmit in the deployment, the engine's included,
  sampled every 0.2 s), the most alive at once and their peak resident memory, and every
  silver checked equal to its bronze. Then every bronze table
  gets a maintenance's commits (OPTIMIZE ZORDER BY the key, and a VACUUM of the files it
  replaced, by deltalake), written while the incremental sensor is stopped as the backlog is:
  the deployment catches up again (timed from the first run the sensors create after it to
  every silver at its bronze), and every run that follows must have started no Spark (each its
  silver's watermark advanced without a driver) and left its pipeline OK.
- JVM-free figures (`--jvm-free-pipelines`, 500 by default, 0 to leave them out; bronze with
  one batch, silver not loaded): loading the definitions (`cdf_platform.definitions`, in a
  fresh process), one incremental-sensor tick, `cdf-platform status --json`, and one
  `checks_job` run over all.

Usage:
    python -m bench.fleet                          # 100 pipelines x 100 changed keys; 500 JVM-free
    python -m bench.fleet --pipelines 20 --jvm-free-pipelines 100
    python -m bench.fleet --jvm-free-pipelines 0 --stem fleet_catchup   # the catch-up alone
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import psutil
import pyspark

from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    publish,
    run_info,
    scratch_folder,
)
from cdf_platform.core.config import DEFAULT_PIPELINES_PER_RUN
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.orchestration.sensors.incremental_sensor import (
    INCREMENTAL_SENSOR,
    PENDING_STATUSES,
)
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform_testkit.deployment import PROJECT_ROOT, Deployment
from cdf_platform_testkit.lake import orders_pipeline, write_pipelines
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_testkit.postgres import PostgresServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULTS = Path(__file__).resolve().parent / "results"
BIN = Path(sys.executable).parent
# The warm engine's targets; a cold deployment (a driver per run) is held to the ones it had.
CATCH_UP_TARGET_S, DRIVERS_TARGET, JVM_GIB_TARGET = 90.0, 1, 6.0
# The fleet's advance after the maintenance (first run created -> every silver), no Spark.
ADVANCE_TARGET_S = 10.0
COLD_CATCH_UP_TARGET_S, COLD_DRIVERS_TARGET = 300.0, 2
DEFS_TARGET_S, TICK_TARGET_S, STATUS_TARGET_S, CHECKS_TARGET_S = 3.0, 2.0, 3.0, 30.0
INITIAL_ROWS = 1_000


def _pipelines_file(root: Path, ids: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return write_pipelines(root / "pipelines.yaml", [orders_pipeline(i) for i in ids])


class DriverWatch:
    """A thread counting the Spark driver JVMs under the code server: every one started, the
    most alive at once, and their summed resident memory at its peak; and the CPU time each
    part of the deployment used (`cpu_seconds`: the last reading of every process seen, so a
    process's last 0.2 s before it exits is not counted)."""

    def __init__(self, deployment: Deployment) -> None:
        self.deployment = deployment
        self.started: set[int] = set()
        self.most_alive = 0
        self.peak_bytes = 0
        self._cpu: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="driver-watch", daemon=True)

    def _role(self, process: psutil.Process) -> str:
        engine = self.deployment.engine
        if engine.alive() and process.pid == engine.pid:
            return "engine (Spark Connect server)"
        if process.name() == "java":
            return "Spark driver JVMs"
        roots = {
            self.deployment.code_server.pid: "code server",
            self.deployment.daemon.pid: "daemon",
            self.deployment.webserver.pid: "webserver",
        }
        if process.pid in roots:
            return roots[process.pid]
        if "spawn_main" in " ".join(process.cmdline()):
            return "run workers (Python)"
        return "other deployment processes"

    def _watch(self) -> None:
        while not self._stop.is_set():
            alive, memory = 0, 0
            for process in self.deployment.processes():
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    command = process.cmdline()
                    # A driver, not the short-lived launcher that builds its command line.
                    if (
                        process.name() == "java"
                        and "org.apache.spark.deploy.SparkSubmit" in command
                        and "org.apache.spark.launcher.Main" not in command
                    ):
                        self.started.add(process.pid)
                        alive += 1
                        memory += process.memory_info().rss
                    # The role is read each time: a driver's process is the launcher's shell
                    # script until it execs java, under the same pid.
                    times = process.cpu_times()
                    self._cpu[process.pid] = (
                        self._role(process),
                        times.user + times.system,
                    )
            self.most_alive = max(self.most_alive, alive)
            self.peak_bytes = max(self.peak_bytes, memory)
            self._stop.wait(0.2)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds by part of the deployment, over the processes seen."""
        totals: dict[str, float] = {}
        for role, seconds in self._cpu.values():
            totals[role] = totals.get(role, 0.0) + seconds
        return dict(sorted(totals.items()))

    def start(self) -> DriverWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _not_caught_up(deployment: Deployment, waiting: dict[str, int]) -> dict[str, int]:
    """The pipelines of `waiting` (id -> bronze's latest version, which does not move during
    the catch-up) whose silver watermark is not that version yet: only silver's newest commits
    are read, for the pipelines still waiting (a caught-up one stays caught up)."""
    from cdf_platform.state.watermark import read_silver_state

    return {
        pipeline_id: latest
        for pipeline_id, latest in waiting.items()
        if read_silver_state(str(deployment.silver(pipeline_id)), pipeline_id).watermark != latest
    }


def load_silver(spark: SparkSession, lake: LakeLayout) -> float:
    """Every pipeline of `lake` loaded (its initial load) in this process's Spark session;
    the seconds it took."""
    from cdf_platform.run import PipelineRunner

    bound = lake.bound()
    control = bound.control()
    started = time.monotonic()
    for spec in bound.specs():
        PipelineRunner.on(control, lambda: spark).run(spec)
    return time.monotonic() - started


def catch_up(
    spark: SparkSession, workdir: Path, n: int, changed_keys: int, *, warm: bool = True
) -> dict[str, Any]:
    """Part 1: `n` pipelines, each `changed_keys` behind, caught up by the deployment (with the
    warm engine unless not `warm`); then a maintenance's commits on every bronze table, caught
    up without Spark."""
    ids = [f"f{k:03d}" for k in range(1, n + 1)]
    with PostgresServer() as postgres:
        pipelines = [orders_pipeline(i) for i in ids]
        deployment = Deployment(workdir, postgres, pipelines, warm=warm)
        for pipeline_id in ids:
            write_orders_batch(str(deployment.bronze(pipeline_id)), batch_size=INITIAL_ROWS)
        bound = deployment.lake_layout.bound()
        control = bound.control()
        with deployment.environment():
            instance = deployment.instance()
            watch = DriverWatch(deployment)
            try:
                deployment.start()
                deadline = time.monotonic() + 3600
                # The deployment loads every silver itself (its engine, when warm, warms up).
                loading_started = time.monotonic()
                waiting = {i: DeltaLog(str(deployment.bronze(i))).latest_version() for i in ids}
                while waiting := _not_caught_up(deployment, waiting):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the fleet did not load within an hour")
                    time.sleep(2)
                _wait_for_runs(instance, deadline)
                initial_load_s = time.monotonic() - loading_started
                # The backlog, on every bronze table at once: written while the incremental
                # sensor is stopped, so the catch-up starts from a whole backlog (not from the
                # first tables written, while the writer still writes the others).
                stop_sensor(deployment, instance, deadline)
                backlog_at = time.time()
                for pipeline_id in ids:
                    bronze = str(deployment.bronze(pipeline_id))
                    write_orders_batch(bronze, batch_size=changed_keys)
                waiting = {i: DeltaLog(str(deployment.bronze(i))).latest_version() for i in ids}
                loads = {"backlog written": os.getloadavg()[0]}
                deployment.set_sensor(INCREMENTAL_SENSOR, running=True)
                watch.start()
                bench_cpu = time.process_time()
                while waiting := _not_caught_up(deployment, waiting):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the fleet did not catch up within an hour")
                    time.sleep(2)
                caught_up_at = time.time()
                loads["caught up"] = os.getloadavg()[0]
                # This process's own share (the polls above and the watch's sampling).
                bench_cpu = time.process_time() - bench_cpu
                catch_up_cpu = watch.cpu_seconds()
                _wait_for_runs(instance, deadline)
                records = instance.get_run_records(
                    dg.RunsFilter(created_after=datetime.fromtimestamp(backlog_at, UTC))
                )
                # A nightly maintenance on every bronze table: commits that change no row,
                # written while the incremental sensor is stopped, as the backlog was.
                stop_sensor(deployment, instance, deadline)
                maintained_at = time.time()
                waiting = {i: maintain(str(deployment.bronze(i))) for i in ids}
                maintenance_written_s = time.time() - maintained_at
                loads["maintenance written"] = os.getloadavg()[0]
                deployment.set_sensor(INCREMENTAL_SENSOR, running=True)
                while waiting := _not_caught_up(deployment, waiting):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the fleet did not take the maintenance within an hour")
                    time.sleep(1)
                advanced_at = time.time()
                loads["maintenance taken"] = os.getloadavg()[0]
                _wait_for_runs(instance, deadline)
                after = instance.get_run_records(
                    dg.RunsFilter(created_after=datetime.fromtimestamp(maintained_at, UTC))
                )
                maintenance = spark_use(instance, after)
                advance_steps = step_breakdown(instance, after)
            finally:
                watch.stop()
                deployment.stop()
            steps = step_breakdown(instance, records)
            instance.dispose()
        statuses = deployment.statuses()
        first_run = min(r.create_timestamp.timestamp() for r in records)
        mismatched = []
        for pipeline_id in ids:
            silver = spark.read.format("delta").load(str(deployment.silver(pipeline_id)))
            bronze = spark.read.format("delta").load(str(deployment.bronze(pipeline_id)))
            columns = [c for c in bronze.columns if not c.startswith("_")]
            if silver.select(*columns).exceptAll(bronze.select(*columns)).count() or (
                bronze.select(*columns).exceptAll(silver.select(*columns)).count()
            ):
                mismatched.append(pipeline_id)
    return {
        "pipelines": n,
        "changed_keys": changed_keys,
        "warm": warm,
        "seconds": caught_up_at - first_run,
        "runs": len(records),
        "failed_runs": sum(
            1 for r in records if r.dagster_run.status is dg.DagsterRunStatus.FAILURE
        ),
        "drivers_started": len(watch.started),
        "drivers_alive_at_most": watch.most_alive,
        "jvm_peak_gib": watch.peak_bytes / 2**30,
        "silver_mismatched": mismatched,
        "initial_load_by_the_deployment_s": initial_load_s,
        "steps": steps,
        "load_log": load_log_breakdown(control, ids),
        "cpu_seconds": {**catch_up_cpu, "the benchmark's own polling": bench_cpu},
        "load_average": loads,
        "maintenance": {
            "cpu_seconds": {
                part: seconds - catch_up_cpu.get(part, 0.0)
                for part, seconds in watch.cpu_seconds().items()
            },
            "seconds": advanced_at - min(r.create_timestamp.timestamp() for r in after),
            "written_s": maintenance_written_s,
            "from_the_first_commit_s": advanced_at - maintained_at,
            "steps": advance_steps,
            "runs": len(after),
            **maintenance,
            "not_ok": sorted(i for i, status in statuses.items() if status.state.value != "OK"),
        },
    }


def stop_sensor(deployment: Deployment, instance: dg.DagsterInstance, deadline: float) -> None:
    """Stop the incremental sensor and wait for a tick in progress to end: stopping starts no
    new tick, but one the daemon has begun requests runs for what it finds (some of the tables
    written next, in a run of their own, had the writer started at once)."""
    from dagster._core.scheduler.instigation import TickStatus

    deployment.set_sensor(INCREMENTAL_SENSOR, running=False)
    (state,) = [s for s in instance.all_instigator_state() if s.name == INCREMENTAL_SENSOR]
    while True:
        ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1)
        if not ticks or ticks[0].status is not TickStatus.STARTED:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the incremental sensor's tick did not end")
        time.sleep(0.5)


def maintain(bronze: str) -> int:
    """A maintenance on `bronze` by deltalake: OPTIMIZE ZORDER BY the key (the demo's tables
    hold one file, which a plain compaction leaves alone), then a VACUUM of the files it
    replaced (its START and END commits); returns the table's latest version."""
    from deltalake import DeltaTable

    DeltaTable(bronze).optimize.z_order(["order_id"])
    DeltaTable(bronze).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    return int(DeltaTable(bronze).version())


def _wait_for_runs(instance: dg.DagsterInstance, deadline: float) -> None:
    """Until no run is pending (the runs end with their last pipelines' checks)."""
    while instance.get_run_records(dg.RunsFilter(statuses=PENDING_STATUSES)):
        if time.monotonic() > deadline:
            raise RuntimeError("the fleet's runs did not end within an hour")
        time.sleep(2)


def spark_use(instance: dg.DagsterInstance, records: Sequence[Any]) -> dict[str, int]:
    """What the silver materializations of `records` say of Spark: how many there were, how
    many started Spark, and by mode."""
    found = {"materializations": 0, "started_spark": 0}
    for record in records:
        for event in instance.all_logs(
            record.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ):
            materialization = event.asset_materialization
            assert materialization is not None
            metadata = {name: value.value for name, value in materialization.metadata.items()}
            if "spark_started" not in metadata:
                continue
            found["materializations"] += 1
            found["started_spark"] += int(bool(metadata["spark_started"]))
            mode = f"mode {metadata.get('mode')}"
            found[mode] = found.get(mode, 0) + 1
    return found


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


# The parts of a run's wait in the queue, each between two marks of its event log: its creation
# (the run record), its last planned event (Dagster writes one per asset and check of the run
# after creating it), RUN_ENQUEUED (submitted to the queue), RUN_STARTING (the daemon took it
# off the queue and hands it to the launcher), RUN_START (its process began).
QUEUE_PARTS = {
    "created -> planned events written": ("created", "planned"),
    "planned -> enqueued": ("planned", "enqueued"),
    "enqueued -> dequeued": ("enqueued", "dequeued"),
    "dequeued -> started": ("dequeued", "started"),
}
_PLANNED = {
    dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    dg.DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED,
}
_QUEUE_MARKS = {
    dg.DagsterEventType.RUN_ENQUEUED: "enqueued",
    dg.DagsterEventType.RUN_STARTING: "dequeued",
    dg.DagsterEventType.RUN_START: "started",
}


def step_breakdown(instance: dg.DagsterInstance, records: Sequence[Any]) -> dict[str, float]:
    """Where the runs' time went, from their event logs: the wait in the queue (and its
    parts: the run's planned events written after its creation, the submission to the queue,
    the daemon taking it off the queue, the launch), the time from a run's start to its first
    step (the process and the definitions), the silver steps' durations, and the time between
    one step's end and the next one's start."""
    waits: list[float] = []
    queue_parts: dict[str, list[float]] = {part: [] for part in QUEUE_PARTS}
    to_first: list[float] = []
    durations: dict[str, list[float]] = {"silver": [], "checks": []}
    gaps: list[float] = []
    # The silver runs' own step timings (materialization metadata `<step>_seconds`).
    timed: dict[str, list[float]] = {}
    for record in records:
        run = record.dagster_run
        if record.start_time:
            waits.append(record.start_time - record.create_timestamp.timestamp())
        starts: dict[str, float] = {}
        ends: list[tuple[float, float, str]] = []
        marks: dict[str, float] = {"created": record.create_timestamp.timestamp()}
        for event in instance.all_logs(run.run_id):
            kind = event.dagster_event_type
            if kind in _PLANNED:
                marks["planned"] = event.timestamp  # the last one written
            elif kind in _QUEUE_MARKS:
                marks.setdefault(_QUEUE_MARKS[kind], event.timestamp)
            if kind is dg.DagsterEventType.STEP_START:
                starts[str(event.step_key)] = event.timestamp
            elif kind in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
                begun = starts.get(str(event.step_key))
                if begun is not None:
                    ends.append((begun, event.timestamp, str(event.step_key)))
            elif kind is dg.DagsterEventType.ASSET_MATERIALIZATION:
                materialization = event.asset_materialization
                assert materialization is not None
                for name, value in materialization.metadata.items():
                    if name.endswith("_seconds") and isinstance(value.value, int | float):
                        timed.setdefault(name, []).append(float(value.value))
        for part, (begin, end) in QUEUE_PARTS.items():
            if begin in marks and end in marks:
                queue_parts[part].append(marks[end] - marks[begin])
        ends.sort()
        if ends and record.start_time:
            to_first.append(ends[0][0] - record.start_time)
        for begun, end, step_key in ends:
            durations["checks" if step_key.endswith("_checks") else "silver"].append(end - begun)
        gaps.extend(b[0] - a[1] for a, b in itertools.pairwise(ends))
    every = durations["silver"] + durations["checks"]
    return {
        "queue_wait_median_s": _median(waits),
        **{f"queue: {part} median_s": _median(values) for part, values in queue_parts.items()},
        "start_to_first_step_median_s": _median(to_first),
        "steps": float(len(every)),
        "step_median_s": _median(every),
        "step_total_s": sum(every),
        "silver_step_median_s": _median(durations["silver"]),
        "silver_step_total_s": sum(durations["silver"]),
        "checks_step_median_s": _median(durations["checks"]),
        "checks_step_total_s": sum(durations["checks"]),
        "between_steps_median_s": _median(gaps),
    } | {
        f"run {name.removesuffix('_seconds')} median_s": _median(values)
        for name, values in sorted(timed.items())
    }


def load_log_breakdown(control: Any, ids: list[str]) -> dict[str, float]:
    """The catch-up runs' own timings from the load log (the second entry of each pipeline:
    the first is the initial load): plan, change-set read and silver write, medians."""
    rows = [row for i in ids for row in sorted(control.read_log(i), key=_finished)[1:]]
    return {
        f"{name}_median_s": _median([float(row[f"{name}_seconds"] or 0.0) for row in rows])
        for name in ("plan", "read", "write")
    } | {"entries": float(len(rows))}


def _finished(row: dict[str, Any]) -> Any:
    return row["finished_at"]


def jvm_free(spark: SparkSession, workdir: Path, n: int) -> dict[str, float]:
    """Part 2: the JVM-free figures over `n` pipelines (bronze with one batch, silver loaded
    beforehand in this process, so the control tables hold a row per pipeline as in a running
    fleet; then one more batch per bronze, so every pipeline is behind)."""
    from cdf_platform.definitions import build_defs
    from cdf_platform_testkit.sensors import incremental_tick

    lake_root = workdir / "lake"
    ids = [f"j{k:03d}" for k in range(1, n + 1)]
    pipelines_file = _pipelines_file(workdir, ids)
    for pipeline_id in ids:
        write_orders_batch(str(lake_root / "bronze" / pipeline_id), batch_size=20)
    lake = LakeLayout(lake_root=str(lake_root), pipelines_file=str(pipelines_file))
    initial_load_s = load_silver(spark, lake)
    for pipeline_id in ids:
        write_orders_batch(str(lake_root / "bronze" / pipeline_id), batch_size=20)
    env = {
        **os.environ,
        "CDF_LAKE_ROOT": str(lake_root),
        "CDF_PIPELINES_FILE": str(pipelines_file),
        "PYTHONPATH": str(PROJECT_ROOT),
    }
    load = (
        "import time; started = time.monotonic(); from cdf_platform.definitions import defs; "
        "d = defs(); assert len(d.resolve_all_asset_keys()) >= 1; "
        "print(time.monotonic() - started)"
    )
    defs_s = float(
        subprocess.run(
            [sys.executable, "-c", load], env=env, check=True, capture_output=True, text=True
        ).stdout.split()[-1]
    )
    started = time.monotonic()
    subprocess.run(
        [str(BIN / "cdf-platform"), "status", "--json"],
        env=env,
        check=False,  # exits 1 when a pipeline is unhealthy
        capture_output=True,
    )
    status_s = time.monotonic() - started
    defs = build_defs(lake, automation=False)
    instance = dg.DagsterInstance.ephemeral()
    started = time.monotonic()
    result = incremental_tick(defs, instance)
    tick_s = time.monotonic() - started
    requested = [key for r in result.run_requests or [] for key in r.asset_selection or []]
    assert len(requested) == n, "every pipeline is requested"
    started = time.monotonic()
    checks = defs.resolve_job_def("checks_job").execute_in_process(
        instance=instance, raise_on_error=False
    )
    checks_s = time.monotonic() - started
    evaluations = len(checks.get_asset_check_evaluations())
    return {
        "pipelines": n,
        "definitions_load_s": defs_s,
        "sensor_tick_s": tick_s,
        "status_json_s": status_s,
        "checks_s": checks_s,
        "check_evaluations": evaluations,
        "initial_load_in_one_session_s": initial_load_s,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, default=100)
    parser.add_argument("--changed-keys", type=int, default=100)
    parser.add_argument("--jvm-free-pipelines", type=int, default=500)
    parser.add_argument(
        "--pipelines-per-run",
        type=int,
        help="CDF_PIPELINES_PER_RUN for the deployment (default: the platform's, 50; 1: a run "
        "per pipeline)",
    )
    parser.add_argument(
        "--cold", action="store_true", help="no engine: each run starts a driver JVM of its own"
    )
    parser.add_argument("--stem", default="fleet", help="results file name (without suffix)")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    if args.pipelines_per_run is not None:
        os.environ["CDF_PIPELINES_PER_RUN"] = str(args.pipelines_per_run)
    per_run = os.environ.get("CDF_PIPELINES_PER_RUN", str(DEFAULT_PIPELINES_PER_RUN))
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    with scratch_folder(args, "cdf-fleet-") as workdir:
        from cdf_platform.spark.runtime.session import build_spark_session
        from cdf_platform.spark.runtime.session_conf import SparkSettings

        # One Spark session for the preparation of both parts (the silver tables' first loads,
        # and the comparison of every silver with its bronze).
        spark = build_spark_session(
            SparkSettings(master="local[2]", app_name="cdf_platform_fleet", shuffle_partitions=2)
        )
        free = (
            jvm_free(spark, workdir / "jvm_free", args.jvm_free_pipelines)
            if args.jvm_free_pipelines
            else None
        )
        loads.append(os.getloadavg()[0])
        fleet = catch_up(
            spark, workdir / "catch_up", args.pipelines, args.changed_keys, warm=not args.cold
        )
        spark.stop()
    loads += [*fleet["load_average"].values(), os.getloadavg()[0]]
    n, k = fleet["pipelines"], fleet["changed_keys"]
    at = ", ".join(f"{when} {load:.1f}" for when, load in fleet["load_average"].items())
    catch_up_target = COLD_CATCH_UP_TARGET_S if args.cold else CATCH_UP_TARGET_S
    drivers_target = COLD_DRIVERS_TARGET if args.cold else DRIVERS_TARGET
    maintenance = fleet["maintenance"]
    figures = [
        Figure(
            f"{n} pipelines x {k} changed keys caught up (first run created -> every silver)",
            f"{fleet['seconds']:.0f} s",
            f"<= {catch_up_target:.0f} s",
            fleet["seconds"] <= catch_up_target and not fleet["silver_mismatched"],
            fleet["seconds"],
            f"{fleet['runs']} runs ({fleet['failed_runs']} failed); silver equal to bronze: "
            f"{'all' if not fleet['silver_mismatched'] else fleet['silver_mismatched']}; "
            f"load average (1 min): {at}",
        ),
        Figure(
            "Spark JVMs alive at once (started in all)",
            f"{fleet['drivers_alive_at_most']} ({fleet['drivers_started']})",
            f"<= {drivers_target}",
            fleet["drivers_alive_at_most"] <= drivers_target,
            float(fleet["drivers_alive_at_most"]),
            "java processes running SparkSubmit in the deployment (the engine, or each run's "
            "driver), sampled every 0.2 s",
        ),
        Figure(
            f"OPTIMIZE + VACUUM on all {n} bronze tables, then caught up: runs that started Spark",
            f"{maintenance['started_spark']} of {maintenance['materializations']}",
            "0, every status OK",
            maintenance["started_spark"] == 0
            and maintenance["materializations"] >= n
            and not maintenance["not_ok"],
            float(maintenance["started_spark"]),
            f"{maintenance['runs']} runs; "
            + ", ".join(f"{key} {value}" for key, value in maintenance.items() if "mode" in key)
            + f"; not OK: {maintenance['not_ok'] or 'none'}",
        ),
        Figure(
            f"the advance of {n} pipelines after it, no Spark (first run created -> every silver)",
            f"{maintenance['seconds']:.1f} s",
            f"<= {ADVANCE_TARGET_S:.0f} s",
            maintenance["seconds"] <= ADVANCE_TARGET_S,
            maintenance["seconds"],
            f"the maintenance's commits took {maintenance['written_s']:.1f} s to write (the "
            f"incremental sensor stopped); from their first to every silver "
            f"{maintenance['from_the_first_commit_s']:.1f} s; silver step median "
            f"{maintenance['steps']['silver_step_median_s']:.2f} s, checks step median "
            f"{maintenance['steps']['checks_step_median_s']:.2f} s",
        ),
        Figure(
            "peak resident memory of the Spark drivers",
            f"{fleet['jvm_peak_gib']:.2f} GiB",
            f"<= {JVM_GIB_TARGET:.0f} GiB",
            fleet["jvm_peak_gib"] <= JVM_GIB_TARGET,
            fleet["jvm_peak_gib"],
            "summed over the drivers alive at one sample",
        ),
    ]
    m = free["pipelines"] if free else 0
    for name, key, target in (
        ("definitions load", "definitions_load_s", DEFS_TARGET_S),
        ("incremental-sensor tick", "sensor_tick_s", TICK_TARGET_S),
        ("`cdf-platform status --json`", "status_json_s", STATUS_TARGET_S),
        ("checks_job over every pipeline", "checks_s", CHECKS_TARGET_S),
    ):
        if free is None:
            break
        figures.append(
            Figure(
                f"{m} pipelines: {name}",
                f"{free[key]:.2f} s",
                f"<= {target:.0f} s",
                free[key] <= target,
                free[key],
                "no JVM",
            )
        )
    document = {
        "run": run_info(
            "cdf_platform fleet benchmark",
            f"at most {per_run} pipeline(s) per run, "
            + ("a driver JVM per run" if args.cold else "the warm engine"),
            command_line("bench.fleet", argv),
            [
                f"Catch-up: {n} pipelines, bronze {INITIAL_ROWS:,} rows each, silver loaded "
                f"beforehand, then {k} changed keys per bronze; the deployment of deploy/ "
                "(PostgreSQL, code server, daemon, webserver), "
                + (
                    "each run starting a local Spark driver."
                    if args.cold
                    else "every run's Spark work on the warm engine (`cdf-platform engine`), "
                    "every run forked by the warm run worker (`cdf-platform run-worker`)."
                ),
                f"JVM-free: {m} pipelines, bronze of 20 rows, silver loaded beforehand (the "
                "control tables hold a row per pipeline), then 20 more rows per bronze."
                if free
                else "JVM-free part left out (`--jvm-free-pipelines 0`).",
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            "Where the catch-up's time went (medians; seconds)": [
                {"figure": name.replace("_", " "), "value": f"{value:.2f}"}
                for name, value in (fleet["steps"] | fleet["load_log"]).items()
            ],
            "CPU of the catch-up, by part of the deployment (seconds of one core)": [
                {"part": part, "cpu_s": f"{seconds:.1f}"}
                for part, seconds in fleet["cpu_seconds"].items()
            ],
            "Where the advance's time went (medians; seconds)": [
                {"figure": name.replace("_", " "), "value": f"{value:.2f}"}
                for name, value in maintenance["steps"].items()
            ],
            "CPU from the maintenance's commits to every silver advanced (seconds of one core)": [
                {"part": part, "cpu_s": f"{seconds:.1f}"}
                for part, seconds in maintenance["cpu_seconds"].items()
            ],
        },
        "fleet": fleet,
        "jvm_free": free,
    }
    publish(args.out, args.stem, document)


if __name__ == "__main__":
    main()
