"""The streaming peer: what a team would run instead of the platform to keep silver in step with
bronze, measured on the same commit stream by `bench.freshness --fleet`.

One Spark driver process (`python -m bench.streaming_peer --config <json>`, a local pyspark
session with Delta on `local[*]`, the engine's driver memory and the engine's local Spark
settings: shuffle partitions, Delta's snapshot parallelism sized to the cores, fair scheduling
with a pool per query) runs one Structured Streaming query per bronze table:
`readStream.format("delta").option("readChangeFeed", "true")` from the table's current
snapshot, a processing-time trigger, a checkpoint per query, and `foreachBatch`:

- SCD1: the batch collapsed to the latest change per key (`update_preimage` dropped, highest
  `_commit_version` first), then one MERGE: delete, update or insert.
- SCD2: each change of the batch becomes a version (`__start_at` = its commit's timestamp,
  `__end_at` = the key's next change's in the batch); one MERGE closes silver's open version of
  every key the batch changes (at the batch's first change of it) and inserts the versions.
  Every change opens a version (no tracked-column comparison), as every demo update changes
  its row.
- Event log: the latest event per key by `ts_ms`, then one MERGE of its row image
  (`coalesce(after, before)`): a delete removes the key, an upsert writes it, each only over an
  older silver row.

Each MERGE is stamped with Delta's idempotent-write confs (`spark.databricks.delta.write.
txnAppId` = the table's id, `txnVersion` = the batch id), so a batch replayed after a restart
commits nothing. After its MERGE commits, each batch appends a line to the peer's log (JSON
lines: table, batch id, the highest bronze `_commit_version` it applied, its row count, and
when the MERGE started and committed): a commit's freshness is the time from the commit to the
first batch of its table that applied its version. That log costs one small aggregate per batch.

Trigger: 1 s by default (`--peer-trigger-seconds`). A team that wants freshness in seconds sets
the shortest processing-time trigger that keeps the driver from spinning (no trigger at all
polls every table's log every 10 ms when idle): at 1 s a commit waits half a second on average
before its query sees it, against 2.5 s for the platform's sensor, so the peer's freshness is
the best this design gives, and its idle cost shows what that polling costs.

The process stops when the config's stop file appears (its queries stopped, the session
closed); a query that fails ends the process with its error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.fleet_lake import KEY, SEQUENCE, SourceKind
from cdf_platform_testkit.deployment import Commit

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
START_AT, END_AT = "__start_at", "__end_at"


@dataclass(frozen=True)
class PeerTable:
    """One query: bronze `bronze` of `kind` into silver `silver`, its checkpoint folder."""

    id: str
    kind: str
    bronze: str
    silver: str
    checkpoint: str


@dataclass(frozen=True)
class PeerConfig:
    """What the peer process runs: its tables, the trigger, the driver's memory, where its log
    goes and the file whose appearance stops it."""

    tables: list[PeerTable]
    trigger_seconds: float
    driver_memory: str
    log: str
    stop_file: str

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: Path) -> PeerConfig:
        raw = json.loads(path.read_text())
        return cls(**{**raw, "tables": [PeerTable(**t) for t in raw["tables"]]})


@dataclass(frozen=True)
class PeerBatch:
    """One line of the peer's log: a micro-batch whose MERGE committed."""

    table: str
    batch_id: int
    max_version: int
    rows: int
    started_at: float
    committed_at: float


def read_peer_log(path: Path) -> list[PeerBatch]:
    """The batches of a peer log, in the order written (a line cut short by a kill is left
    out)."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        try:
            found.append(PeerBatch(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return found


def applied_versions(batches: Sequence[PeerBatch]) -> dict[str, int]:
    """Per table, the highest bronze version a batch applied."""
    found: dict[str, int] = {}
    for batch in batches:
        found[batch.table] = max(found.get(batch.table, -1), batch.max_version)
    return found


def peer_freshness(commits: Sequence[Commit], batches: Sequence[PeerBatch]) -> list[float]:
    """Per commit: seconds from the commit to the end of the first batch of its table that
    applied its version (commits no batch applied are left out)."""
    ordered = sorted(batches, key=lambda b: b.committed_at)
    seconds = []
    for commit in commits:
        first = next(
            (
                b.committed_at
                for b in ordered
                if b.table == commit.pipeline_id and b.max_version >= commit.version
            ),
            None,
        )
        if first is not None:
            seconds.append(first - commit.at)
    return seconds


class PeerLog:
    """The log the queries' batches append to (one lock: batches of many queries end at once)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def append(self, batch: PeerBatch) -> None:
        with self._lock, self.path.open("a") as out:
            out.write(json.dumps(asdict(batch)) + "\n")


@contextmanager
def stamped(spark: SparkSession, app_id: str, version: int) -> Iterator[None]:
    """Delta's idempotent-write confs set on `spark` for the block, unset after."""
    spark.conf.set(TXN_APP_ID, app_id)
    spark.conf.set(TXN_VERSION, str(version))
    try:
        yield
    finally:
        spark.conf.unset(TXN_APP_ID)
        spark.conf.unset(TXN_VERSION)


def _data_columns(frame: DataFrame) -> list[str]:
    return [c for c in frame.columns if not c.startswith("_")]


def merge_scd1(spark: SparkSession, silver: str, batch: DataFrame) -> None:
    """The latest change per key MERGEd into silver: delete, update or insert."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    order = Window.partitionBy(KEY).orderBy(
        F.col("_commit_version").desc(), (F.col("_change_type") != "delete").desc()
    )
    latest = (
        batch.filter(F.col("_change_type") != "update_preimage")
        .withColumn("_rn", F.row_number().over(order))
        .filter(F.col("_rn") == 1)
    )
    values: dict[str, Any] = {c: F.col(f"s.{c}") for c in _data_columns(batch)}
    (
        DeltaTable.forPath(spark, silver)
        .alias("t")
        .merge(latest.alias("s"), f"t.{KEY} = s.{KEY}")
        .whenMatchedDelete("s._change_type = 'delete'")
        .whenMatchedUpdate("s._change_type != 'delete'", set=values)
        .whenNotMatchedInsert("s._change_type != 'delete'", values=values)
        .execute()
    )


def merge_scd2(spark: SparkSession, silver: str, batch: DataFrame) -> None:
    """Every change of the batch as a version; one MERGE closes the open versions of the keys
    it changes and inserts the new versions."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    data = _data_columns(batch)
    changes = batch.filter(F.col("_change_type") != "update_preimage").withColumn(
        "_next_at",
        F.lead("_commit_timestamp").over(Window.partitionBy(KEY).orderBy("_commit_version")),
    )
    types = dict(changes.dtypes)
    closes = changes.groupBy(KEY).agg(F.min("_commit_timestamp").alias(END_AT))
    closes = closes.select(
        F.col(KEY).alias("_merge_key"),
        *(F.lit(None).cast(types[c]).alias(c) if c != KEY else F.col(KEY) for c in data),
        F.lit(None).cast("timestamp").alias(START_AT),
        F.col(END_AT),
    )
    opens = changes.filter(F.col("_change_type") != "delete").select(
        F.lit(None).cast(types[KEY]).alias("_merge_key"),
        *data,
        F.col("_commit_timestamp").alias(START_AT),
        F.col("_next_at").alias(END_AT),
    )
    values: dict[str, Any] = {c: F.col(f"s.{c}") for c in [*data, START_AT, END_AT]}
    (
        DeltaTable.forPath(spark, silver)
        .alias("t")
        .merge(
            closes.unionByName(opens).alias("s"), f"t.{KEY} = s._merge_key AND t.{END_AT} IS NULL"
        )
        .whenMatchedUpdate(set={END_AT: F.col(f"s.{END_AT}")})
        .whenNotMatchedInsert("s._merge_key IS NULL", values=values)
        .execute()
    )


def merge_events(spark: SparkSession, silver: str, batch: DataFrame) -> None:
    """The latest event per key (by `ts_ms`) MERGEd into silver over older rows: a delete
    removes the key, an upsert writes its row image."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    events = batch.select(
        F.coalesce(F.col("after"), F.col("before")).alias("_image"), "op", SEQUENCE
    ).select("_image.*", "op", SEQUENCE)
    order = Window.partitionBy(KEY).orderBy(F.col(SEQUENCE).desc())
    latest = events.withColumn("_rn", F.row_number().over(order)).filter(F.col("_rn") == 1)
    columns = [c for c in events.columns if c != "op"]
    values: dict[str, Any] = {c: F.col(f"s.{c}") for c in columns}
    newer = f"t.{SEQUENCE} < s.{SEQUENCE}"
    (
        DeltaTable.forPath(spark, silver)
        .alias("t")
        .merge(latest.alias("s"), f"t.{KEY} = s.{KEY}")
        .whenMatchedDelete(f"s.op = 'd' AND {newer}")
        .whenMatchedUpdate(f"s.op != 'd' AND {newer}", set=values)
        .whenNotMatchedInsert("s.op != 'd'", values=values)
        .execute()
    )


MERGES = {
    SourceKind.SCD1: merge_scd1,
    SourceKind.SCD2: merge_scd2,
    SourceKind.EVENTS: merge_events,
}


def create_silver(spark: SparkSession, table: PeerTable) -> None:
    """Silver, empty, with the columns its kind keeps (left alone when it exists)."""
    from pyspark.sql.types import LongType, StructField, StructType, TimestampType

    bronze = spark.read.format("delta").load(table.bronze).schema
    kind = SourceKind(table.kind)
    if kind is SourceKind.EVENTS:
        image = bronze["after"].dataType
        assert isinstance(image, StructType)
        fields = [*image.fields, StructField(SEQUENCE, LongType())]
    else:
        fields = list(bronze.fields)
        if kind is SourceKind.SCD2:
            fields += [StructField(START_AT, TimestampType()), StructField(END_AT, TimestampType())]
    empty = spark.createDataFrame([], StructType(fields))
    empty.write.format("delta").mode("ignore").save(table.silver)


def start_query(
    spark: SparkSession, table: PeerTable, trigger_seconds: float, log: PeerLog
) -> StreamingQuery:
    """The table's streaming query, started in a scheduler pool of its own."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    merge = MERGES[SourceKind(table.kind)]

    def apply(batch: DataFrame, batch_id: int) -> None:
        started = time.time()
        found = batch.agg(F.max("_commit_version"), F.count(F.lit(1))).first()
        if found is None or found[0] is None:
            return
        session = batch.sparkSession
        with stamped(session, table.id, batch_id):
            merge(session, table.silver, batch)
        log.append(
            PeerBatch(table.id, batch_id, int(found[0]), int(found[1]), started, time.time())
        )

    spark.sparkContext.setLocalProperty("spark.scheduler.pool", table.id)
    return (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .load(table.bronze)
        .writeStream.queryName(table.id)
        .foreachBatch(apply)
        .option("checkpointLocation", table.checkpoint)
        .trigger(processingTime=f"{trigger_seconds:g} seconds")
        .start()
    )


def peer_session(config: PeerConfig) -> SparkSession:
    """A local session with Delta: the engine's local settings, its driver memory."""
    from cdf_platform.spark.runtime.session import build_spark_session
    from cdf_platform.spark.runtime.session_conf import SparkSettings

    settings = SparkSettings(
        master="local[*]",
        app_name="streaming-peer",
        driver_memory=config.driver_memory,
        extra_conf={"spark.scheduler.mode": "FAIR"},
    )
    return build_spark_session(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    config = PeerConfig.load(args.config)
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    spark = peer_session(config)
    for table in config.tables:
        create_silver(spark, table)
    log = PeerLog(Path(config.log))
    queries = [start_query(spark, t, config.trigger_seconds, log) for t in config.tables]
    print(f"started {len(queries)} queries", flush=True)
    failed = None
    checked = time.monotonic()
    while not stopping.is_set() and not os.path.exists(config.stop_file):
        # One call to the JVM every few seconds: the peer's own loop should cost nothing.
        if time.monotonic() - checked > 5:
            checked = time.monotonic()
            if len(spark.streams.active) < len(queries):
                failed = next((q for q in queries if not q.isActive), None)
                break
        stopping.wait(0.5)
    for query in queries:
        query.stop()
    spark.stop()
    if failed is not None:
        print(f"query {failed.name} failed: {failed.exception()}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
