"""A foreign Spark job beside the measured system: a local pyspark driver of its own (one GiB,
`local[*]`) running the same CPU-heavy aggregation over a generated range in a loop until
killed, as a team's other Spark job on a shared machine would.

Run alone: `python -m bench.foreign_spark` (prints one line per round). `foreign_spark(True)`
runs it as a process of the benchmark for a block.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

ROWS = 20_000_000
DRIVER_MEMORY = "1g"


def main() -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    spark = (
        SparkSession.builder.master("local[*]")
        .appName("foreign-job")
        .config("spark.driver.memory", DRIVER_MEMORY)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rounds = 0
    while True:
        started = time.monotonic()
        frame = spark.range(0, ROWS).select(
            (F.col("id") % 1000).alias("k"), F.sqrt(F.col("id") * 7 + 3).alias("v")
        )
        frame.groupBy("k").agg(F.sum("v"), F.stddev("v")).collect()
        rounds += 1
        print(f"round {rounds}: {time.monotonic() - started:.1f} s", flush=True)


@contextmanager
def foreign_spark(enabled: bool) -> Iterator[subprocess.Popen[bytes] | None]:
    """The foreign job running for the block (nothing when not `enabled`); killed after."""
    if not enabled:
        yield None
        return
    job = subprocess.Popen(
        [sys.executable, "-m", "bench.foreign_spark"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield job
    finally:
        # Its own process group: the driver JVM goes with the Python process.
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()


if __name__ == "__main__":
    main()
