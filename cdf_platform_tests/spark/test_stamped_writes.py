"""Two threads writing through one session (as every write over Spark Connect does) each commit
under their own watermark: the stamp is session state, so `stamped` holds the session's lock."""

from __future__ import annotations

import threading
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.spark.write.merge import TxnStamp, stamped

WRITES = 4


def test_two_threads_writing_through_one_session_keep_their_own_watermarks(
    spark: SparkSession, tmp_path: Path
) -> None:
    tables = {app: str(tmp_path / app) for app in ("left", "right")}
    aligned = threading.Barrier(len(tables))
    failures: list[BaseException] = []

    def writes(app: str) -> None:
        try:
            for version in range(1, WRITES + 1):
                aligned.wait(timeout=60)
                with stamped(spark, TxnStamp(app, version, metadata=app)):
                    spark.range(1).write.format("delta").mode("append").save(tables[app])
        except BaseException as err:  # reported by the main thread
            failures.append(err)
            aligned.abort()

    threads = [threading.Thread(target=writes, args=(app,)) for app in tables]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    for app, path in tables.items():
        table = DeltaTable(path)
        other = next(a for a in tables if a != app)
        # Every write committed, each under this table's own app id and versions.
        assert table.version() == WRITES - 1
        assert table.transaction_version(app) == WRITES
        assert table.transaction_version(other) is None
        assert {c.get("userMetadata") for c in table.history()} == {app}
