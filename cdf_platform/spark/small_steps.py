"""The small steps of an incremental run, run without generated code.

An incremental run's change set is small (thousands of rows), and so is the log state Delta
builds for silver before its MERGE (one row per silver file). For steps of that size Spark spends
more time generating and compiling Java for each plan (whole-stage code generation, and the
projections and predicates of every expression) than running it (bench/README.md, "Where the
wall time goes"). `interpreted` turns code generation off for a block and restores the
session's settings after it; the MERGE itself, which scans silver's files, keeps it.

The steps run interpreted are a pipeline's change-set read and checks, the key filter's fetch of
the changed keys and `load_table_state`, which makes Delta build silver's state before the MERGE,
so the MERGE reuses it (`cdf_platform.runner`), and a consumer asset's `ChangeBatch.changes()`.
`spark.cdf_platform.interpretSmallSteps` set to `false` keeps code generation on for them.

The settings are session settings: a query another thread runs through the same session inside
the block runs interpreted too (slower, never different).

Example:
    >>> with interpreted(spark):  # doctest: +SKIP
    ...     load_table_state(spark, "/lake/silver/orders")
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from cdf_platform.core.sql import sql_path
from cdf_platform.spark.session import scoped_conf, switched_on

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENABLED_CONF = "spark.cdf_platform.interpretSmallSteps"
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


def load_table_state(spark: SparkSession, table: str) -> int:
    """Make Delta build the state of the table at `table` (its files and their statistics) now,
    as a MERGE into it would; Delta keeps it for the table's current version, so the next
    statement on that version reuses it. Returns the table's file count."""
    detail = spark.sql(f"DESCRIBE DETAIL {sql_path(table)}").select("numFiles").collect()
    return int(detail[0]["numFiles"])
