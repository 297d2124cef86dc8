"""A class-data archive of Spark's classes for the JVMs the tests start (JDK application class
data sharing, a dynamic archive).

Every Spark JVM the suite starts (the session of each test process, CLI runs, Dagster run
processes, killed runs, Connect servers) loads, links and verifies the same thousands of
classes from Spark's jars before it does any work. With those classes mapped from an archive a
short-lived Spark process (a local session, a Delta write, an ALTER, a MERGE and a change-feed
read, then exit) took 22.0-23.7 CPU s instead of 29.8-30.8, and 17-18 s wall instead of 23-24
(machine-wide CPU from /proc/stat, 2-core test machine, `SHORT_LIVED` options, twice each).

The archive is made once per stack: its name carries a digest of the Java runtime's version,
the pyspark and delta-spark versions and the names of Spark's jars, in
`$CDF_TEST_CLASS_ARCHIVE_DIR` (default: `share/cdf_platform_testkit` under the Python
environment's prefix, the project's `.venv`). One test process makes it, in the background
(`python -m cdf_platform_testkit.class_archive PATH`: a JVM that runs that Delta work, then
dumps the classes it loaded with `jcmd VM.cds dynamic_dump` into a temporary file renamed into
place), while the tests run; a JVM started before it is in place, or whose class path is not
the archive's (a standalone worker's own conf folder, another Spark home), runs without it and
says nothing (`-Xlog:cds=off,cds+dynamic=off`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

from cdf_platform.spark.runtime.session import java_executable
from cdf_platform.spark.runtime.session_conf import spark_home

ARCHIVE_DIR_ENV = "CDF_TEST_CLASS_ARCHIVE_DIR"
# The archive's log tags off: a JVM that cannot use it (or finds none yet) starts without it
# and prints nothing (their warnings go to stdout, which tests read).
QUIET = "-Xlog:cds=off,cds+dynamic=off"


def _java() -> str:
    return java_executable() or "java"


def _jcmd() -> str | None:
    java = Path(_java())
    beside = java.resolve().parent / "jcmd"
    return str(beside) if beside.exists() else shutil.which("jcmd")


def stack_digest() -> str:
    """A digest of what the archive depends on: the Java runtime's build, the pyspark and
    delta-spark versions, and the names of Spark's jars (the class path a JVM checks the
    archive against)."""
    version = subprocess.run(
        [_java(), "-version"], capture_output=True, text=True, timeout=60, check=True
    ).stderr
    jars = sorted(p.name for p in (Path(spark_home()) / "jars").glob("*.jar"))
    parts = [version, metadata.version("pyspark"), metadata.version("delta-spark"), *jars]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path() -> Path:
    """Where this stack's archive lives (whether made yet or not)."""
    folder = os.environ.get(ARCHIVE_DIR_ENV) or str(
        Path(sys.prefix) / "share" / "cdf_platform_testkit"
    )
    return Path(folder) / f"spark-classes-{stack_digest()}.jsa"


def java_options(archive: Path) -> str:
    """The JVM options that map the classes of `archive` (none, quietly, while it is not made
    or does not fit the JVM's class path)."""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


@contextlib.contextmanager
def made_in_background(archive: Path) -> Iterator[None]:
    """Start making `archive` unless it is there or another process is making it (a lock file
    beside it); on leaving, wait for the making this block started."""
    if archive.exists() or _jcmd() is None:
        yield
        return
    archive.parent.mkdir(parents=True, exist_ok=True)
    with (archive.parent / f"{archive.name}.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another test process makes it
            yield
            return
        if archive.exists():  # made while this one waited for the lock
            yield
            return
        log = archive.parent / f"{archive.name}.log"
        with log.open("w") as output:
            maker = subprocess.Popen(
                [sys.executable, "-m", __name__, str(archive)],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            yield
        finally:
            try:
                maker.wait(timeout=600)
            except subprocess.TimeoutExpired:
                maker.kill()
                maker.wait()


def make(archive: Path) -> None:
    """Start a local Spark session whose JVM records the classes it loads, run a small Delta
    workload, and dump those classes into `archive` (in place only once complete)."""
    from pyspark.sql import SparkSession

    from cdf_platform.spark.runtime.session import build_spark_session
    from cdf_platform.spark.runtime.session_conf import SparkSettings
    from cdf_platform_testkit.jvm_options import SHORT_LIVED

    os.environ["SPARK_SUBMIT_OPTS"] = f"{SHORT_LIVED} -XX:+RecordDynamicDumpInfo {QUIET}"
    spark: SparkSession = build_spark_session(
        SparkSettings(master="local[1]", shuffle_partitions=1)
    )
    with tempfile.TemporaryDirectory() as folder:
        table = f"{folder}/t"
        spark.range(100).write.format("delta").save(table)
        spark.sql(
            f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES (delta.enableChangeDataFeed = true)"
        )
        spark.range(50, 150).createOrReplaceTempView("changes")
        spark.sql(
            f"MERGE INTO delta.`{table}` t USING changes s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
        )
        feed = spark.read.format("delta").option("readChangeFeed", "true")
        feed.option("startingVersion", 1).load(table).count()
        spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
        archive.parent.mkdir(parents=True, exist_ok=True)
        partial = archive.with_name(f"partial-{os.getpid()}-{archive.name}")
        subprocess.run(
            [str(_jcmd()), str(pid), "VM.cds", "dynamic_dump", str(partial)],
            check=True,
            timeout=300,
        )
    spark.stop()
    os.replace(partial, archive)


if __name__ == "__main__":
    make(Path(sys.argv[1]))
