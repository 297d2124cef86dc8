"""What an SCD1 change set's MERGE costs without Spark: deltalake's change-feed read and MERGE,
on the fleet's shape, beside what the engine spends on one.

The fleet benchmarks are bound by the engine's CPU: at a commit a second the engine spent about
1.3 CPU s per commit (`bench/results/freshness_fleet.md`), a warm session 1.84 JVM CPU s per
incremental run of 50 changed keys (`bench/results/session_runs_steady.md`), most of it the
fixed cost of a Delta MERGE in Spark (about ten jobs, their planning and generated code), not
the rows. This command measures the same step done by deltalake (delta-rs) in this process: an
`orders` bronze of `--rows` rows (the test kit's writer, change feed on) and its SCD1 silver
(the bronze rows and `_source_commit_version`, change feed on, written by deltalake), then
`--rounds` times: a batch of `--batch` changed keys committed to bronze (about 60% updates, 30%
inserts, 10% deletes), its change feed read (`DeltaTable.load_cdf`), the latest change per key
kept, and one MERGE into silver (deletes, updates, inserts) that carries the transaction's
(app id, version) and the commit's metadata in the same commit, as the platform's silver
commits do. Wall and CPU seconds of each step; at the end silver must equal bronze.

The platform's runs of small SCD1 change sets take this path, with these functions
(`cdf_platform/run/jvm_free/`); this command measures the step alone, without the
run's plan and its records.
Writes `bench/results/deltalake_merge.{json,md}`.

Usage:
    python -m bench.deltalake_merge [--rows 1000] [--batch 50] [--rounds 30]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from bench.report import (
    Figure,
    add_output_options,
    command_line,
    machine_info,
    median,
    publish,
    run_info,
    scratch_folder,
)
from cdf_platform.core.silver_columns import SOURCE_VERSION
from cdf_platform.run.jvm_free.latest_merge import (
    SilverTable,
    latest_changes,
    merge_latest,
    plain_schema,
)
from cdf_platform.spark.write.merge import TxnStamp
from cdf_platform_testkit.orders_bronze import write_orders_batch

RESULTS = Path(__file__).parent / "results"
KEY = "order_id"
APP_ID = "cdf_platform/bench"


def _cpu() -> float:
    times = os.times()
    return times.user + times.system


def merge_step(bronze: str, silver: str, version: int) -> dict[str, int]:
    """Bronze version `version`'s changes merged into silver in one commit stamped with the
    transaction (APP_ID, `version`), by the platform's JVM-free functions; the MERGE's row
    counts."""
    changes = pa.table(
        DeltaTable(bronze).load_cdf(starting_version=version, ending_version=version).read_all()
    )
    changes = changes.cast(plain_schema(changes.schema))
    source = latest_changes(changes, [KEY], pipeline_id="bench", table=bronze)
    metadata = json.dumps({"cdf_platform": {"mode": "incremental", "end_version": version}})
    stamp = TxnStamp(app_id=APP_ID, version=version, metadata=metadata)
    counts = merge_latest(SilverTable.of(DeltaTable(silver)), source, [KEY], stamp)
    return {"inserted": counts.inserted, "updated": counts.updated, "deleted": counts.deleted}


def measure(workdir: Path, rows: int, batch: int, rounds: int) -> dict[str, Any]:
    """The steps' wall and CPU seconds, their row counts, and whether silver equals bronze."""
    bronze, silver = str(workdir / "bronze"), str(workdir / "silver")
    write_orders_batch(bronze, batch_size=rows, seed=11)
    loaded = DeltaTable(bronze)
    snapshot = loaded.to_pyarrow_table()
    snapshot = snapshot.append_column(
        SOURCE_VERSION, pa.array([loaded.version()] * snapshot.num_rows, pa.int64())
    )
    write_deltalake(
        silver,
        snapshot,
        configuration={"delta.enableChangeDataFeed": "true"},
        commit_properties=CommitProperties(
            app_transactions=[Transaction(APP_ID, loaded.version())]
        ),
    )
    steps: list[dict[str, Any]] = []
    for _ in range(rounds):
        write_orders_batch(bronze, batch_size=batch, seed=11)
        version = DeltaTable(bronze).version()
        wall, cpu = time.monotonic(), _cpu()
        counts = merge_step(bronze, silver, version)
        steps.append(
            {"wall_s": time.monotonic() - wall, "cpu_s": _cpu() - cpu, "version": version, **counts}
        )
    final = DeltaTable(silver)
    current = final.to_pyarrow_table().drop_columns([SOURCE_VERSION]).sort_by(KEY)
    expected = DeltaTable(bronze).to_pyarrow_table().select(current.column_names).sort_by(KEY)
    return {
        "steps": steps,
        "equal": current.equals(expected),
        "silver_rows": current.num_rows,
        "bronze_rows": expected.num_rows,
        "txn": final.transaction_version(APP_ID),
        "change_data_files": len(os.listdir(Path(silver) / "_change_data"))
        if (Path(silver) / "_change_data").exists()
        else 0,
    }


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1000, help="bronze rows at the start")
    parser.add_argument("--batch", type=int, default=50, help="changed keys per bronze commit")
    parser.add_argument("--rounds", type=int, default=30, help="commits, each merged into silver")
    add_output_options(parser, RESULTS)
    args = parser.parse_args(argv)
    started = time.monotonic()
    loads = [round(os.getloadavg()[0], 2)]
    with scratch_folder(args, "deltalake_merge_") as workdir:
        found = measure(workdir, args.rows, args.batch, args.rounds)
    loads.append(round(os.getloadavg()[0], 2))
    steps = found["steps"]
    walls = [step["wall_s"] for step in steps]
    cpus = [step["cpu_s"] for step in steps]
    figures = [
        Figure(
            scenario=f"an SCD1 change set of {args.batch} keys read and merged by deltalake",
            measured=f"{median(cpus):.3f} CPU s",
            target="",
            met=None,
            value=median(cpus),
            detail=f"median of {len(steps)}; p95 {_p95(cpus):.3f} CPU s; wall median "
            f"{median(walls):.3f} s, p95 {_p95(walls):.3f} s",
        ),
        Figure(
            scenario="silver equal to bronze at the end, the transaction at bronze's version",
            measured=f"{found['equal']} ({found['silver_rows']} rows); txn {found['txn']}",
            target="equal",
            met=bool(found["equal"]),
            value=int(found["equal"]),
            detail=f"silver's change feed: {found['change_data_files']} files",
        ),
    ]
    document: dict[str, Any] = {
        "run": run_info(
            "An SCD1 MERGE without Spark (deltalake)",
            "deltalake_merge",
            command_line("bench.deltalake_merge", argv),
            [
                f"an orders bronze of {args.rows} rows and its SCD1 silver, then {args.rounds} "
                f"commits of {args.batch} changed keys, each read from bronze's change feed and "
                "merged into silver by deltalake in this process"
            ],
            loads,
            started,
        ),
        "machine": machine_info(pyspark.__version__),
        "figures": figures,
        "tables": {
            "Each step": [
                {
                    "bronze version": step["version"],
                    "wall s": f"{step['wall_s']:.3f}",
                    "CPU s": f"{step['cpu_s']:.3f}",
                    "inserted": step["inserted"],
                    "updated": step["updated"],
                    "deleted": step["deleted"],
                }
                for step in steps
            ]
        },
        "notes": [
            "CPU: this process's user + system time (deltalake's threads included).",
            "The engine's figure for the same step: about 1.84 JVM CPU s per incremental run "
            "of 50 changed keys in a warm session (bench/results/session_runs_steady.md).",
        ],
    }
    publish(args.out, "deltalake_merge", document)


if __name__ == "__main__":
    main()
