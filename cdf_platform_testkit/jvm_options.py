"""JVM options of the Java processes the tests start, for a small machine they share.

On 2 cores the suite is CPU-bound, and a JVM that lives a minute spends most of its CPU on
itself: G1's parallel and concurrent GC threads, and C2 compiling code it will barely run.
Measured on the 2-core test machine (machine-wide CPU seconds from /proc/stat, idle otherwise):
- a local Spark start plus three small Delta operations, in a process of its own (what a CLI
  run, a Dagster run process or a killed run is): 39-42 CPU s with the defaults, 22-24 with
  `SHORT_LIVED`;
- `runner/test_rebuild.py` on the long-lived test session: 257 CPU s (158 s wall) with the
  defaults, 231 (150 s) with the serial collector, 243 and 191 s wall with C1 only too: a
  session that runs the whole suite's work needs C2, so it gets `LONG_LIVED`.
"""

from __future__ import annotations

from pathlib import Path

from cdf_platform.spark.runtime.session_conf import SHORT_RUN_JAVA_OPTIONS
from cdf_platform_testkit.class_archive import java_options

# Serial GC and the C1 compiler only (what the platform documents for a short local run):
# every Spark process the tests start (CLI runs, Dagster run processes, servers, executors).
SHORT_LIVED = SHORT_RUN_JAVA_OPTIONS
# The test session's own driver: serial GC, full tiered compilation (last flag wins, so this
# overrides SHORT_LIVED, which reaches it through SPARK_SUBMIT_OPTS).
LONG_LIVED = "-XX:+UseSerialGC -XX:TieredStopAtLevel=4"


def java_environment(archive: Path) -> dict[str, str]:
    """The environment variables that give every Spark JVM a test starts `SHORT_LIVED` and the
    class-data archive `archive` (`class_archive`): spark-submit adds SPARK_SUBMIT_OPTS to the
    driver's command; spark-class adds SPARK_DAEMON_JAVA_OPTS to a standalone master's and
    worker's (and to a Connect server's)."""
    options = f"{SHORT_LIVED} {java_options(archive)}"
    return {"SPARK_SUBMIT_OPTS": options, "SPARK_DAEMON_JAVA_OPTS": options}
