"""A run meets each of the six replay-window breaks: FAIL_FAST raises the classified error before
writing anything and logs the incident; SNAPSHOT_REBUILD reconciles silver from the pinned
snapshot instead."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.errors import (
    CdfNotEnabled,
    CdfPlatformError,
    IncompatibleSchemaChange,
    ReplayWindowLost,
)
from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.watermark import read_silver_state
from cdf_platform.window.replay_window import WindowBreakKind, compute_replay_window
from cdf_platform_tests.bronze import (
    control_for,
    insert,
    make_bronze,
    rows,
    spec_for,
    sql,
    vacuum_retain_zero,
)

HOUR = 3600.0


def _commit_file(path: str, version: int) -> str:
    return os.path.join(path, "_delta_log", f"{version:020d}.json")


def _age(path: str, seconds: float) -> None:
    moment = time.time() - seconds
    os.utime(path, (moment, moment))


# Each breaker starts after the initial load (versions 0 create, 1 insert; watermark 1) and
# returns the version at which the window breaks for a read starting at 2.
def _snapshot_unavailable(spark: SparkSession, path: str) -> int:
    sql(spark, path, "UPDATE {t} SET amount = amount + 1 WHERE id = 1")  # 2
    sql(spark, path, "DELETE FROM {t} WHERE id = 2")  # 3
    DeltaTable(path).create_checkpoint()  # checkpoint at 3
    for version in (0, 1, 2):  # log cleanup behind the checkpoint
        os.remove(_commit_file(path, version))
    insert(spark, path, [(4, "dee", 40)])  # 4
    return 2


def _commit_missing(spark: SparkSession, path: str) -> int:
    sql(spark, path, "UPDATE {t} SET amount = amount + 1 WHERE id = 1")  # 2
    sql(spark, path, "DELETE FROM {t} WHERE id = 2")  # 3
    insert(spark, path, [(4, "dee", 40)])  # 4
    # A checkpoint after the hole keeps the table itself readable; a batch CDF read of [2, 4]
    # then skips version 3 silently.
    DeltaTable(path).create_checkpoint()
    os.remove(_commit_file(path, 3))
    return 3


def _time_travel_limit(spark: SparkSession, path: str) -> int:
    sql(
        spark,
        path,
        "ALTER TABLE {t} SET TBLPROPERTIES "
        "('delta.deletedFileRetentionDuration' = 'interval 1 hours')",
    )  # 2
    sql(spark, path, "UPDATE {t} SET amount = amount + 1 WHERE id = 1")  # 3
    _age(_commit_file(path, 2), 2 * HOUR)
    return 2


def _files_missing(spark: SparkSession, path: str) -> int:
    sql(spark, path, "UPDATE {t} SET amount = amount + 1 WHERE id = 1")  # 2: cdc file
    insert(spark, path, [(4, "dee", 40)])  # 3
    vacuum_retain_zero(spark, path)  # deletes version 2's _change_data file
    return 2


def _cdf_disabled(spark: SparkSession, path: str) -> int:
    sql(spark, path, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'false')")
    sql(spark, path, "UPDATE {t} SET amount = amount + 1 WHERE id = 1")  # 3: no change data
    sql(spark, path, "ALTER TABLE {t} SET TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')")
    return 2


def _column_dropped(spark: SparkSession, path: str) -> int:
    sql(
        spark,
        path,
        "ALTER TABLE {t} SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name', "
        "'delta.minReaderVersion' = '2', 'delta.minWriterVersion' = '5')",
    )  # 2
    sql(spark, path, "UPDATE {t} SET name = 'ada2' WHERE id = 1")  # 3
    sql(spark, path, "ALTER TABLE {t} DROP COLUMN amount")  # 4
    insert_no_amount = spark.createDataFrame([(5, "eve")], "id BIGINT, name STRING")
    insert_no_amount.write.format("delta").mode("append").save(path)  # 5
    return 4


def _append(spark: SparkSession, path: str, columns: list[str]) -> None:
    """Append one row with whatever columns bronze has now."""
    values = {"id": (9, "BIGINT"), "name": ("zed", "STRING"), "amount": (90, "INT")}
    ddl = ", ".join(f"{c} {values[c][1]}" for c in columns)
    frame = spark.createDataFrame([tuple(values[c][0] for c in columns)], ddl)
    frame.write.format("delta").mode("append").save(path)


BREAKERS: list[tuple[Callable[[SparkSession, str], int], WindowBreakKind, type]] = [
    (_snapshot_unavailable, WindowBreakKind.SNAPSHOT_UNAVAILABLE, ReplayWindowLost),
    (_commit_missing, WindowBreakKind.COMMIT_MISSING, ReplayWindowLost),
    (_time_travel_limit, WindowBreakKind.TIME_TRAVEL_LIMIT, ReplayWindowLost),
    (_files_missing, WindowBreakKind.FILES_MISSING, ReplayWindowLost),
    (_cdf_disabled, WindowBreakKind.CDF_DISABLED, CdfNotEnabled),
    (_column_dropped, WindowBreakKind.SCHEMA_CHANGE, IncompatibleSchemaChange),
]


@pytest.mark.parametrize(
    ("breaker", "kind", "error"), BREAKERS, ids=[kind.value for _, kind, _ in BREAKERS]
)
def test_window_break_is_classified_before_any_write_and_rebuild_recovers(
    spark: SparkSession,
    lake: Path,
    breaker: Callable[[SparkSession, str], int],
    kind: WindowBreakKind,
    error: type[CdfPlatformError],
) -> None:
    spec = spec_for(lake, fallback_mode="FAIL_FAST")
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    PipelineRunner.on(control, lambda: spark).run(spec)
    silver_version = DeltaTable(spec.target).version()

    break_version = breaker(spark, spec.source)
    window = compute_replay_window(spec.source)
    found = window.break_for(2)
    assert found is not None
    assert (found.kind, found.version) == (kind, break_version)

    with pytest.raises(error) as caught:
        PipelineRunner.on(control, lambda: spark).run(spec)
    assert caught.value.version == break_version
    assert "What to do" in str(caught.value)
    assert DeltaTable(spec.target).version() == silver_version  # silver as it was
    assert read_silver_state(spec.target, spec.id).watermark == 1
    last = control.read_log(spec.id)[-1]
    assert (last["outcome"], last["incident_code"]) == ("FAILED", error.incident_code)

    rebuild_spec = spec.model_copy(update={"fallback_mode": FallbackMode.SNAPSHOT_REBUILD})
    result = PipelineRunner.on(control, lambda: spark).run(rebuild_spec)
    assert result.mode is RunMode.REBUILD
    assert result.incident_code == error.incident_code
    latest = window.latest_version
    assert result.watermark_after == latest
    assert read_silver_state(spec.target, spec.id).watermark == latest
    bronze_columns = [field.name for field in DeltaTable(spec.source).schema().fields]
    assert rows(spark, spec.target, *bronze_columns) == rows(spark, spec.source)
    if kind is WindowBreakKind.SCHEMA_CHANGE:  # the column bronze dropped is retired: NULL
        assert rows(spark, spec.target, "amount") == [(None,)] * 4
    assert control.read_log(spec.id)[-1]["incident_code"] == error.incident_code

    _append(spark, spec.source, bronze_columns)
    after = PipelineRunner.on(control, lambda: spark).run(rebuild_spec)
    assert after.mode is RunMode.INCREMENTAL
    assert rows(spark, spec.target, *bronze_columns) == rows(spark, spec.source)
