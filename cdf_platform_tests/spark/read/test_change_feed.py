"""A change-feed read hands each of its options to Delta once."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from cdf_platform.spark.read.change_feed import COMMIT_VERSION, read_changes
from cdf_platform_tests.bronze import insert, make_bronze

# Spark's CaseInsensitiveStringMap logs this for every key a map holds twice, in two cases.
DUPLICATED_KEY = "Converting duplicated key"
OPTIONS_LOGGER = "org.apache.spark.sql.util.CaseInsensitiveStringMap"


@contextmanager
def warnings_of(spark: SparkSession, logger_name: str) -> Iterator[list[str]]:
    """The lines the JVM's log4j logger `logger_name` writes at WARN or above while the block
    runs (collected when it ends), whatever the level the session's log configuration gives it."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    log4j = jvm.org.apache.logging.log4j
    writer = jvm.java.io.StringWriter()
    appender = log4j.core.appender.WriterAppender.createAppender(
        None, None, writer, "cdf-platform-test-capture", False, True
    )
    appender.start()
    logger = log4j.LogManager.getLogger(logger_name)
    level = logger.getLevel()
    log4j.core.config.Configurator.setLevel(logger_name, log4j.Level.WARN)
    logger.addAppender(appender)
    lines: list[str] = []
    try:
        yield lines
    finally:
        logger.removeAppender(appender)
        log4j.core.config.Configurator.setLevel(logger_name, level)
        appender.stop()
        lines.extend(writer.toString().splitlines())


def test_a_change_feed_read_sets_each_option_once(spark: SparkSession, tmp_path: Path) -> None:
    """A path load merged the reader's lowercased options with Delta's camel-case copy of them:
    every read logged three duplicated keys (readChangeFeed, startingVersion, endingVersion)."""
    path = str(tmp_path / "bronze")
    make_bronze(spark, path, [(1, "ada", 10)])
    insert(spark, path, [(2, "bob", 20)])

    jvm = spark.sparkContext._jvm
    assert jvm is not None
    with warnings_of(spark, OPTIONS_LOGGER) as logged:
        jvm.org.apache.logging.log4j.LogManager.getLogger(OPTIONS_LOGGER).warn("capture probe")
        versions = sorted(r[COMMIT_VERSION] for r in read_changes(spark, path, 1, 2).collect())

    assert versions == [1, 2]
    assert any("capture probe" in line for line in logged), logged  # the capture sees the logger
    assert [line for line in logged if DUPLICATED_KEY in line] == []
