"""The small steps of an incremental run, run without generated code.

An incremental run's change set is small (thousands of rows), and so is the log state Delta
builds for silver before its MERGE (one row per silver file). For steps of that size Spark spends
more time generating and compiling Java for each plan (whole-stage code generation, and the
projections and predicates of every expression) than running it (bench/README.md, "Where the
wall time goes"). `interpreted` turns code generation off for a block and restores the
session's settings after it.

The steps run interpreted are a pipeline's change-set read and checks, the key filter's fetch of
the changed keys, `load_table_state`, which makes Delta build silver's state before the MERGE,
so the MERGE reuses it, and the count of the rows the run's commit changed (`cdf_platform.run`),
and a consumer asset's `ChangeBatch.changes()`.
`spark.cdf_platform.interpretSmallSteps` set to `false` keeps code generation on for them.

The MERGE of such a change set runs interpreted too when silver is small: its files take at most
`spark.cdf_platform.interpretedMergeMaxBytes` (256 KiB by default; `0` keeps code generation
on for every MERGE), as `load_table_state` finds them (`interpreted_merge`). A MERGE into a
silver that small compiles more than it runs, and in a long-lived driver (a run applying many
pipelines) every compiled plan is more work for the JVM's own compiler too (docs/performance.md,
the fleet's catch-up); a MERGE into a larger silver keeps code generation for its scans.

The settings are session settings: a query another thread runs through the same session inside
the block runs interpreted too (slower, never different).

Such a MERGE into a silver of at most `spark.cdf_platform.copyOnWriteMergeMaxBytes` (256 KiB;
`0`: as the table says) rewrites the files it touches instead of writing deletion vectors
(`copy_on_write_merge`): for files that small a deletion vector costs more than the rewrite.

A change set of that size also runs on a fixed plan: adaptive query execution re-plans after
every shuffle, which for small inputs costs more than it saves (bench/README.md). `fixed_plan`
turns it off for an incremental run whose change files take at most
`spark.cdf_platform.fixedPlanMaxChangeBytes` (256 MiB by default; `0` keeps it on), and sets
the shuffle partitions to what adaptive execution would coalesce them to: one per
PARTITION_BYTES of change files (Spark's advisory partition size), at least one, at most the
session's cores or the partitions configured. A change set of a few thousand rows then shuffles
into one partition and its MERGE writes one data file (and one change file) into silver, not
one per core. A larger backlog keeps the session's plan, for adaptive execution's partition
sizing and skew handling.

Silver's state does not depend on the change set, so `loading_table_state` builds it on a second
thread while the change set is read; `spark.cdf_platform.loadSilverStateAhead` set to `false`
leaves it to the caller, after the read.

Example:
    >>> with interpreted(spark):  # doctest: +SKIP
    ...     load_table_state(spark, "/lake/silver/orders")
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.core.errors import UnsafeSparkConfig
from cdf_platform.core.sql import sql_path
from cdf_platform.planning.plan import SMALL_CHANGE_BYTES
from cdf_platform.spark.runtime.session import is_connect_session, scoped_conf, switched_on
from cdf_platform.spark.runtime.session_conf import local_cores

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

logger = logging.getLogger(__name__)

ENABLED_CONF = "spark.cdf_platform.interpretSmallSteps"
AHEAD_CONF = "spark.cdf_platform.loadSilverStateAhead"
FIXED_PLAN_CONF = "spark.cdf_platform.fixedPlanMaxChangeBytes"
FIXED_PLAN_MAX_BYTES = SMALL_CHANGE_BYTES
MERGE_CONF = "spark.cdf_platform.interpretedMergeMaxBytes"
# Silver's bytes up to which a small change set's MERGE runs interpreted. The gain is the driver's
# compiling (docs/performance.md, the fleet's catch-up: silver of 15 KB); a 1M-row silver (10 MiB)
# took up to twice as long per run with its MERGE interpreted in some sessions, so larger silver
# keeps generated code. `python -m bench.merge_codegen` times single runs both ways.
INTERPRETED_MERGE_MAX_BYTES = 256 * 1024
COPY_ON_WRITE_CONF = "spark.cdf_platform.copyOnWriteMergeMaxBytes"
# Silver's bytes up to which a small change set's MERGE rewrites the files it touches instead of
# marking their replaced rows in deletion vectors. Rewriting a file of a silver that small costs
# less than a deletion vector's bookkeeping: the fleet's catch-up (100 silvers of 1,000 rows,
# 100 changed keys each) took 112 s with its MERGEs rewriting against 151 s with deletion vectors
# (median MERGE 0.97 s against 1.54 s; docs/performance.md).
COPY_ON_WRITE_MAX_BYTES = 256 * 1024
# Delta's own switch: False makes MERGE rewrite touched files even where deletion vectors are on.
MERGE_PERSISTENT_DVS = "spark.databricks.delta.merge.deletionVectors.persistent"
ADAPTIVE_OFF = {"spark.sql.adaptive.enabled": "false"}
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
# Bytes of change files per shuffle partition on a fixed plan: the default of Spark's
# spark.sql.adaptive.advisoryPartitionSizeInBytes, which adaptive execution coalesces to.
PARTITION_BYTES = 64 * 1024 * 1024
CODEGEN_OFF = {
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}


@contextmanager
def interpreted(spark: SparkSession) -> Iterator[None]:
    """Code generation off in `spark` for the block (unless the session turns this off); each
    setting gets back the value it had."""
    if not switched_on(spark, ENABLED_CONF):
        yield
        return
    with scoped_conf(spark, CODEGEN_OFF):
        yield


def _byte_setting(spark: SparkSession, key: str, default: int, off: str) -> int:
    """The whole number of bytes session setting `key` holds (`default` when unset).

    Raises:
        UnsafeSparkConfig: the setting is not a whole number of bytes.
    """
    raw = str(spark.conf.get(key, str(default))).strip()
    try:
        return int(raw)
    except ValueError:
        raise UnsafeSparkConfig(
            f"{key} must be a whole number of bytes, got {raw!r}",
            action=f"set {key} to a byte count (0 {off})",
        ) from None


def fixed_plan_limit(spark: SparkSession) -> int:
    """The largest change set (bytes of change files) `fixed_plan` runs without adaptive
    query execution.

    Raises:
        UnsafeSparkConfig: the setting is not a whole number of bytes.
    """
    return _byte_setting(
        spark, FIXED_PLAN_CONF, FIXED_PLAN_MAX_BYTES, "keeps adaptive execution on"
    )


def interpreted_merge_limit(spark: SparkSession) -> int:
    """The largest silver (bytes of its files) `interpreted_merge` runs a MERGE into without
    generated code.

    Raises:
        UnsafeSparkConfig: the setting is not a whole number of bytes.
    """
    return _byte_setting(
        spark, MERGE_CONF, INTERPRETED_MERGE_MAX_BYTES, "keeps code generation on for the MERGE"
    )


def copy_on_write_limit(spark: SparkSession) -> int:
    """The largest silver (bytes of its files) `copy_on_write_merge` runs a MERGE into by
    rewriting the files it touches.

    Raises:
        UnsafeSparkConfig: the setting is not a whole number of bytes.
    """
    return _byte_setting(
        spark,
        COPY_ON_WRITE_CONF,
        COPY_ON_WRITE_MAX_BYTES,
        "keeps deletion vectors for every MERGE into a silver that has them on",
    )


def session_cores(spark: SparkSession) -> int | None:
    """The cores `spark`'s jobs run on: the context's default parallelism in process; over
    Spark Connect a local server master's cores, else None (a cluster's are not known)."""
    if is_connect_session(spark):
        return local_cores(str(spark.conf.get("spark.master", "")))
    return int(spark.sparkContext.defaultParallelism)


def fixed_plan_conf(spark: SparkSession, change_bytes: int) -> dict[str, str]:
    """Adaptive execution off, and the shuffle partitions adaptive execution would have
    coalesced a shuffle of `change_bytes` to: one per PARTITION_BYTES, at least one, at most
    the session's cores or the partitions configured."""
    configured = int(str(spark.conf.get(SHUFFLE_PARTITIONS, "200")))
    cores = session_cores(spark)
    by_size = max(1, -(-change_bytes // PARTITION_BYTES))
    partitions = min(by_size, configured, cores if cores is not None else configured)
    return {**ADAPTIVE_OFF, SHUFFLE_PARTITIONS: str(partitions)}


@contextmanager
def fixed_plan(spark: SparkSession, change_bytes: int | None) -> Iterator[None]:
    """A fixed plan (`fixed_plan_conf`) in `spark` for the block when the change set's files
    take at most `fixed_plan_limit` bytes (unknown: the session's plan); each setting gets
    back its value."""
    limit = fixed_plan_limit(spark)
    if change_bytes is None or limit <= 0 or change_bytes > limit:
        yield
        return
    with scoped_conf(spark, fixed_plan_conf(spark, change_bytes)):
        yield


@dataclass(frozen=True)
class TableState:
    """What `load_table_state` found: the table's file count and their bytes."""

    files: int
    bytes: int


def load_table_state(spark: SparkSession, table: str) -> TableState:
    """Make Delta build the state of the table at `table` (its files and their statistics) now,
    as a MERGE into it would; Delta keeps it for the table's current version, so the next
    statement on that version reuses it. Returns its file count and their bytes."""
    detail = spark.sql(f"DESCRIBE DETAIL {sql_path(table)}").select("numFiles", "sizeInBytes")
    found = detail.collect()[0]
    return TableState(files=int(found["numFiles"]), bytes=int(found["sizeInBytes"]))


class StateLoad:
    """The outcome of `loading_table_state`: `state` once the table's state is built."""

    def __init__(self) -> None:
        self.state: TableState | None = None

    @property
    def loaded(self) -> bool:
        """Whether the table's state was built."""
        return self.state is not None


@contextmanager
def loading_table_state(spark: SparkSession, table: str) -> Iterator[StateLoad]:
    """`load_table_state(spark, table)` on a second thread while the block runs; the block
    ends when it has finished.

    A failure is not raised here: `loaded` stays False and the caller loads the state itself,
    where its error is classified like any other (so is the switch turned off).
    """
    load = StateLoad()
    if not switched_on(spark, AHEAD_CONF):
        yield load
        return

    def build() -> None:
        try:
            load.state = load_table_state(spark, table)
        except Exception as err:  # the caller's own load reports it, classified
            logger.debug("building the state of %s ahead failed: %s", table, err)

    thread = threading.Thread(target=build, name="silver-state", daemon=True)
    thread.start()
    try:
        yield load
    finally:
        thread.join()


@contextmanager
def interpreted_merge(spark: SparkSession, silver: TableState) -> Iterator[None]:
    """Code generation off (`interpreted`) for the block, a small change set's MERGE, when
    `silver`'s files take at most `interpreted_merge_limit` bytes; else the session's settings.

    Raises:
        UnsafeSparkConfig: the limit's setting is not a whole number of bytes.
    """
    limit = interpreted_merge_limit(spark)
    if limit <= 0 or silver.bytes > limit:
        yield
        return
    with interpreted(spark):
        yield


@contextmanager
def copy_on_write_merge(spark: SparkSession, silver: TableState) -> Iterator[None]:
    """A small change set's MERGE into a silver whose files take at most `copy_on_write_limit`
    bytes rewrites the files it touches, deletion vectors on or not (Delta's
    `merge.deletionVectors.persistent` off for the block); else the session's settings. The rows
    and the change feed are the same either way; silver keeps its table properties.

    Raises:
        UnsafeSparkConfig: the limit's setting is not a whole number of bytes.
    """
    limit = copy_on_write_limit(spark)
    if limit <= 0 or silver.bytes > limit:
        yield
        return
    with scoped_conf(spark, {MERGE_PERSISTENT_DVS: "false"}):
        yield
