"""The benchmark's data: a CDF-enabled bronze table, a backlog of changes, and a pristine silver.

Bronze holds `rows` keys, generated with `spark.range` (no Python loops). The backlog spreads
`changed_keys` distinct keys (70% updates, 20% inserts, 10% deletes) over `commits` MERGE
commits. The changed existing keys are either a fixed permutation of the key space (uniform: they
are spread over every bronze and silver file, as updates to random rows are) or consecutive keys
in `CLUSTER_RANGES` key ranges (clustered: recent orders, one tenant, a day being corrected).
Inserts are new keys above the existing ones. Silver is brought to the version just
before the backlog by the platform itself (an initial load), then frozen as a *pristine* copy
(silver + control tables) that each repetition copies, so every measured run applies exactly
the same backlog to exactly the same state.
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.sql import sql_path
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

PIPELINE_ID = "bench"
KEY = "id"
DATA_COLUMNS = ["id", "name", "category", "amount", "quantity", "updated_at"]
BRONZE_DDL = (
    "id BIGINT, name STRING, category STRING, amount DOUBLE, quantity INT, updated_at TIMESTAMP"
)
# Bronze files of about this many rows (a 1M-row table is 4 files, 4M is 16); silver's first load
# writes files of at most as many (spark.sql.files.maxRecordsPerFile in the bench session).
ROWS_PER_FILE = 250_000
# Key ranges of a clustered backlog's updates and deletes.
CLUSTER_RANGES = 4
UPDATE_SHARE, DELETE_SHARE = 0.7, 0.1


@dataclass(frozen=True)
class Backlog:
    """Counts of one backlog: distinct keys updated, inserted and deleted over `commits`."""

    updates: int
    inserts: int
    deletes: int
    commits: int
    clustered: bool = False

    @classmethod
    def for_changed_keys(cls, changed_keys: int, commits: int, clustered: bool = False) -> Backlog:
        """70% updates, 20% inserts, 10% deletes of `changed_keys` (at least one of each)."""
        changed = max(changed_keys, 3)
        updates = max(1, round(changed * UPDATE_SHARE))
        deletes = max(1, round(changed * DELETE_SHARE))
        return cls(updates, changed - updates - deletes, deletes, commits, clustered)

    @property
    def changed_keys(self) -> int:
        """All distinct keys the backlog touches."""
        return self.updates + self.inserts + self.deletes


def workload_name(rows: int, *, clustered: bool) -> str:
    """A workload's name in samples and fingerprints: its rows, and how its backlog lies."""
    return f"{rows}{'-clustered' if clustered else ''}"


@dataclass(frozen=True)
class Workload:
    """A built bronze table with its backlog, and the pristine silver to copy per repetition.

    Attributes:
        bronze: Path of the bronze table.
        pristine: Folder holding `silver/` and `_control/` at watermark `start_version - 1`.
        rows: Bronze rows before the backlog.
        backlog: What the backlog changes.
        start_version / end_version: The backlog's bronze versions (both included).
        build_seconds: Wall time to build bronze, silver and the backlog (not a benchmark figure).
    """

    bronze: str
    pristine: Path
    rows: int
    backlog: Backlog
    start_version: int
    end_version: int
    build_seconds: float

    @property
    def name(self) -> str:
        """The workload's name in samples and fingerprints (`workload_name`)."""
        return workload_name(self.rows, clustered=self.backlog.clustered)

    def copy_state(self, into: Path) -> tuple[PipelineSpec, ControlTable]:
        """A fresh copy of the pristine silver and control tables under `into` (a new folder:
        Delta caches table state by path, so a reused path could serve stale snapshots)."""
        shutil.copytree(self.pristine, into)
        return spec_for(self.bronze, into / "silver"), ControlTable(str(into / "_control"))

    @property
    def expected_rows(self) -> int:
        """Silver rows once the backlog is applied."""
        return self.rows + self.backlog.inserts - self.backlog.deletes


def spec_for(bronze: str, silver: Path) -> PipelineSpec:
    """The benchmark pipeline from `bronze` to `silver` (hard deletes)."""
    return PipelineSpec(
        id=PIPELINE_ID, source=bronze, target=str(silver), keys=[KEY], delete_mode="hard"
    )


def _coprime_step(rows: int) -> int:
    """A multiplier coprime with `rows`: i -> i * step % rows is then a permutation."""
    step = max(3, int(rows * 0.618_033_988_75))
    while math.gcd(step, rows) != 1:
        step += 1
    return step


def _changed_existing_key(rows: int, clustered: bool) -> Column:
    """The existing key the backlog's `id`-th update or delete changes: a permutation of the key
    space (uniform), or the `id`-th key of `CLUSTER_RANGES` runs of consecutive keys, one in the
    middle of each of as many equal slices of the key space (clustered)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    index = F.col(KEY)
    if not clustered:
        return (index * F.lit(_coprime_step(rows))) % F.lit(rows)
    ranges = F.lit(CLUSTER_RANGES)
    width = rows // CLUSTER_RANGES
    return (index % ranges) * F.lit(width) + F.lit(width // 2) + (index / ranges).cast("bigint")


def _rows_frame(ids: DataFrame, tag: Column) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    key = F.col(KEY)
    return ids.select(
        key,
        F.concat(F.lit("customer-"), key.cast("string"), tag).alias("name"),
        F.concat(F.lit("segment-"), (key % 37).cast("string")).alias("category"),
        ((key * 7919) % 100_000 / 100.0 + F.length(tag)).alias("amount"),
        ((key % 1_000) + F.length(tag)).cast("int").alias("quantity"),
        F.timestamp_seconds(F.lit(1_700_000_000) + key % 86_400 + F.length(tag)).alias(
            "updated_at"
        ),
    )


def _split(total: int, parts: int, index: int) -> tuple[int, int]:
    """Bounds [lo, hi) of the `index`-th of `parts` near-equal slices of range(total)."""
    return total * index // parts, total * (index + 1) // parts


def write_bronze(spark: SparkSession, path: str, rows: int) -> None:
    """Version 0: the CDF-enabled table; version 1: `rows` keys 0..rows-1."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    spark.sql(
        f"CREATE TABLE {sql_path(path)} ({BRONZE_DDL}) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    files = max(1, round(rows / ROWS_PER_FILE))
    ids = spark.range(0, rows, numPartitions=files)
    _rows_frame(ids, F.lit("")).write.format("delta").mode("append").save(path)


def write_backlog(
    spark: SparkSession, path: str, rows: int, backlog: Backlog, *, round_index: int = 0
) -> None:
    """`backlog.commits` MERGE commits on bronze; each key is changed by one commit only.

    Round `round_index` changes keys no earlier round changed (its updates and deletes take the
    next slice of the permuted key space, its inserts the keys above the earlier rounds'
    inserts), so backlogs written one after another on the same table are alike and never
    overlap, as long as `(round_index + 1) * (updates + deletes) <= rows`.
    """
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    existing = backlog.updates + backlog.deletes
    if (round_index + 1) * existing > rows:
        raise ValueError(f"round {round_index} of {existing} changed keys exceeds {rows} rows")
    permuted = _changed_existing_key(rows, backlog.clustered)
    table = DeltaTable.forPath(spark, path)
    values: dict[str, str | Column] = {c: f"s.{c}" for c in DATA_COLUMNS}
    changed, inserted = round_index * existing, rows + round_index * backlog.inserts
    for commit in range(backlog.commits):
        tag = F.lit(f"-r{round_index}v{commit + 1}" if round_index else f"-v{commit + 1}")
        u_lo, u_hi = _split(backlog.updates, backlog.commits, commit)
        d_lo, d_hi = _split(backlog.deletes, backlog.commits, commit)
        i_lo, i_hi = _split(backlog.inserts, backlog.commits, commit)
        updates = spark.range(changed + u_lo, changed + u_hi).select(permuted.alias(KEY))
        offset = changed + backlog.updates
        deletes = spark.range(offset + d_lo, offset + d_hi).select(permuted.alias(KEY))
        inserts = spark.range(inserted + i_lo, inserted + i_hi)
        source = (
            _rows_frame(updates, tag)
            .withColumn("_op", F.lit("U"))
            .unionByName(_rows_frame(inserts, tag).withColumn("_op", F.lit("I")))
            .unionByName(_rows_frame(deletes, tag).withColumn("_op", F.lit("D")))
        )
        (
            table.alias("t")
            .merge(source.alias("s"), f"t.{KEY} = s.{KEY}")
            .whenMatchedDelete("s._op = 'D'")
            .whenMatchedUpdate("s._op = 'U'", set=values)
            .whenNotMatchedInsert("s._op = 'I'", values=values)
            .execute()
        )


def build_workload(
    spark: SparkSession,
    root: Path,
    *,
    rows: int,
    backlog: Backlog,
    clock: Callable[[], float],
    base: Path | None = None,
) -> Workload:
    """Bronze with `rows` keys, silver loaded at version 1 and frozen, then the backlog.

    `base` is a folder for bronze and the pristine silver before any backlog: when an earlier
    build of the same `rows` left them there they are copied from it (a second backlog on the
    same tables without writing them again), else they are written and left there."""
    started = clock()
    bronze = str(root / "bronze")
    pristine = root / "pristine"
    if base is not None and base.exists():
        shutil.copytree(base / "bronze", bronze)
        shutil.copytree(base / "pristine", pristine)
    else:
        write_bronze(spark, bronze, rows)
        result = PipelineRunner.on(ControlTable(str(pristine / "_control")), lambda: spark).run(
            spec_for(bronze, pristine / "silver")
        )
        assert result.watermark_after == 1, result
        if base is not None:
            shutil.copytree(bronze, base / "bronze")
            shutil.copytree(pristine, base / "pristine")
    write_backlog(spark, bronze, rows, backlog)
    return Workload(
        bronze=bronze,
        pristine=pristine,
        rows=rows,
        backlog=backlog,
        start_version=2,
        end_version=1 + backlog.commits,
        build_seconds=clock() - started,
    )


def fingerprint(spark: SparkSession, table: str) -> tuple[int, int]:
    """(row count, order-independent hash sum) of a table's data columns, to prove that every
    method produced the same silver."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    frame = spark.read.format("delta").load(table)
    row = frame.select(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.xxhash64(*DATA_COLUMNS).cast("decimal(38,0)")).alias("hash"),
    ).collect()[0]
    return int(row["rows"]), int(row["hash"] or 0)


# Beside a commit's MERGE metrics: the bytes of the files it rewrote or marked, and of the files
# it wrote (`last_commit_metrics`).
TOUCHED_BYTES = "touchedFileBytes"
WRITTEN_BYTES = "writtenFileBytes"
# The MERGE metrics that show how much of silver a run rewrote.
MERGE_METRICS = (
    "numSourceRows",
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numTargetRowsCopied",
    "numTargetFilesRemoved",
    "numTargetFilesAdded",
    "numTargetDeletionVectorsAdded",
    "executionTimeMs",
    "scanTimeMs",
    "rewriteTimeMs",
    "materializeSourceTimeMs",
)


def last_commit_metrics(table: str) -> dict[str, str]:
    """Operation and MERGE metrics of the table's latest commit, and the bytes of the files it
    rewrote or marked (`TOUCHED_BYTES`: what a MERGE's write pass read in full) and of the files
    it wrote (`WRITTEN_BYTES`), read from its commit file (JVM-free). A file given a deletion
    vector is removed and added again under its own path: it counts as read, not as written."""
    import json

    log = Path(table) / "_delta_log"
    latest = max(log.glob("*.json"), key=lambda p: int(p.stem))
    actions = [json.loads(line) for line in latest.read_text().splitlines() if line.strip()]
    info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    metrics = info.get("operationMetrics") or {}
    removed = {
        a["remove"]["path"]: int(a["remove"].get("size") or 0) for a in actions if "remove" in a
    }
    added = {a["add"]["path"]: int(a["add"]["size"]) for a in actions if "add" in a}
    written = sum(size for path, size in added.items() if path not in removed)
    return {
        "operation": str(info.get("operation")),
        **{k: str(metrics[k]) for k in MERGE_METRICS if k in metrics},
        TOUCHED_BYTES: str(sum(removed.values())),
        WRITTEN_BYTES: str(written),
    }
