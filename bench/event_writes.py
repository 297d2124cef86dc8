"""What one Dagster event written to PostgreSQL costs, with and without a held connection.

dagster-postgres opens its storages' SQLAlchemy engines with `NullPool`: every event a run, the
daemon or a sensor writes opens a new connection to PostgreSQL (and PostgreSQL starts a backend
process for it), writes, and closes it. A shared run of 50 pipelines writes 200 planned events
after Dagster creates it (one per asset and check of the run) and about ten events per step;
`bench.fleet` measured the planned events alone at about 2 s of each run's time in the queue.

This command starts a PostgreSQL server (`cdf_platform_testkit.postgres`), then writes the
planned events of such a run (`--assets` materializations planned and three checks planned
each) through dagster-postgres's event log storage `--rounds` times with its own engine, and
as many with the same storage given an engine that holds one connection (SQLAlchemy's
`QueuePool`, `pool_size=1`). For each way: the wall time, the CPU seconds of this process and
of the PostgreSQL server's processes. Writes `bench/results/event_writes.{json,md}`.

Usage:
    python -m bench.event_writes [--assets 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import dagster as dg
import psutil
import pyspark
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationPlanned,
)
from dagster._core.events import AssetMaterializationPlannedData, DagsterEvent, DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster_postgres.event_log import PostgresEventLogStorage
from dagster_postgres.utils import create_pg_engine

from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    median,
    publish,
    run_info,
)
from cdf_platform_testkit.postgres import PostgresServer

RESULTS = Path(__file__).parent / "results"
CHECKS = ("consumer_lag", "replay_window", "foreign_writes")


def planned_events(run_id: str, assets: int) -> list[EventLogEntry]:
    """The planned events of a run of `assets` silver assets with three checks each."""
    events = []
    for n in range(assets):
        key = dg.AssetKey(["silver", f"p{n:03d}"])
        step = f"silver__p{n:03d}"
        events.append(
            DagsterEvent(
                event_type_value=DagsterEventType.ASSET_MATERIALIZATION_PLANNED.value,
                job_name="incremental_job",
                message=f"incremental_job intends to materialize asset {key.to_string()}",
                event_specific_data=AssetMaterializationPlannedData(asset_key=key),
                step_key=step,
            )
        )
        for check in CHECKS:
            events.append(
                DagsterEvent(
                    event_type_value=DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED.value,
                    job_name="incremental_job",
                    message=f"incremental_job intends to execute asset check {check}",
                    event_specific_data=AssetCheckEvaluationPlanned(
                        asset_key=key, check_name=check
                    ),
                    step_key=f"{step}_checks",
                )
            )
    return [
        EventLogEntry(
            error_info=None,
            level=10,
            user_message="",
            run_id=run_id,
            timestamp=time.time(),
            dagster_event=event,
        )
        for event in events
    ]


def _alive_children_cpu(process: psutil.Process) -> float:
    """CPU seconds (user and system) of `process`'s children alive now (a backend may end while
    they are listed: it is then counted by its parent's `children_*` times instead)."""
    while True:
        try:
            children = process.children(recursive=True)
            break
        except psutil.NoSuchProcess:
            continue  # one ended while its parent's list was read: read the list again
    total = 0.0
    for child in children:
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def measure(assets: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per way of connecting: wall seconds, this process's and PostgreSQL's CPU seconds, per
    round of one run's planned events (`postgres_cpu`)."""
    found: dict[str, dict[str, list[float]]] = {}
    with PostgresServer() as postgres:
        storage = PostgresEventLogStorage(postgres.url)
        engines = {
            "a connection per write (dagster-postgres's NullPool)": storage._engine,
            "one held connection (QueuePool, pool_size=1)": create_pg_engine(
                postgres.url, None, isolation_level="AUTOCOMMIT", pool_size=1, max_overflow=0
            ),
        }
        for way, engine in engines.items():
            storage._engine = engine
            samples: dict[str, list[float]] = {"wall_s": [], "client_cpu_s": [], "server_cpu_s": []}
            for n in range(rounds + 1):  # the first round warms up, not counted
                events = planned_events(f"{way[:1]}-{n}", assets)
                server_before = postgres_cpu(postgres)
                wall, client = time.monotonic(), _own_cpu()
                for event in events:
                    storage.store_event(event)
                wall, client = time.monotonic() - wall, _own_cpu() - client
                if n:
                    samples["wall_s"].append(wall)
                    samples["client_cpu_s"].append(client)
                    samples["server_cpu_s"].append(postgres_cpu(postgres) - server_before)
            found[way] = samples
        storage.dispose()
    return found


def postgres_cpu(postgres: PostgresServer) -> float:
    """CPU seconds of the PostgreSQL server: the postmaster's own and its children's, those
    alive and those that ended (the kernel adds an ended backend's time to its parent's
    `children_*` once the postmaster has waited for it). Not `bench.process_meter`: it samples
    every half second and leaves waited-for time out, so it would miss the backends of a
    connection per event, which live milliseconds."""
    assert postgres.pid is not None
    process = psutil.Process(postgres.pid)
    times = process.cpu_times()
    ended = times.children_user + times.children_system
    return times.user + times.system + ended + _alive_children_cpu(process)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--assets", type=int, default=50, help="silver assets of the run")
    parser.add_argument("--rounds", type=int, default=5, help="runs' planned events written")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    loads = [round(os.getloadavg()[0], 2)]
    found = measure(args.assets, args.rounds)
    loads.append(round(os.getloadavg()[0], 2))
    events = args.assets * (1 + len(CHECKS))
    (pooled_way, pooled), (null_way, null) = sorted(
        found.items(), key=lambda item: "NullPool" in item[0]
    )
    figures = []
    for way, samples in ((null_way, null), (pooled_way, pooled)):
        figures.append(
            Figure(
                scenario=f"{events} planned events written, {way}",
                measured=f"{median(samples['wall_s']):.2f} s",
                target="",
                met=None,
                value=median(samples["wall_s"]),
                detail=f"CPU s: this process {median(samples['client_cpu_s']):.2f}, "
                f"PostgreSQL {median(samples['server_cpu_s']):.2f} (medians of {args.rounds})",
            )
        )
    document: dict[str, Any] = {
        "run": run_info(
            "Dagster's event writes to PostgreSQL, a connection each or one held",
            "event_writes",
            command_line("bench.event_writes", argv),
            [
                f"the planned events of a run of {args.assets} assets with {len(CHECKS)} checks "
                f"each ({events} events), written {args.rounds} times each way after a round "
                "to warm up"
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            "Each round": [
                {
                    "way": way,
                    "round": n + 1,
                    "wall s": f"{wall:.2f}",
                    "this process CPU s": f"{client:.2f}",
                    "PostgreSQL CPU s": f"{server:.2f}",
                }
                for way, samples in found.items()
                for n, (wall, client, server) in enumerate(
                    zip(
                        samples["wall_s"],
                        samples["client_cpu_s"],
                        samples["server_cpu_s"],
                        strict=True,
                    )
                )
            ]
        },
        "notes": [
            "The same storage object and the same events both ways; only the engine differs.",
        ],
    }
    publish(args.out, "event_writes", document)


if __name__ == "__main__":
    main()
