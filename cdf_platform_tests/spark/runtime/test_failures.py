"""Failure classification reads real Spark/Delta failures by their structured facts first."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import (
    ConcurrentWriteConflict,
    ReplayWindowLost,
    SourceNotFound,
    UnknownReadFailure,
)
from cdf_platform.spark.read.change_feed import ReadContext, classify_read_failure, read_changes
from cdf_platform.spark.runtime.failures import RULES, failure_facts, rule_for
from cdf_platform_tests.bronze import make_bronze


def _failure_of(action: object) -> BaseException:
    with pytest.raises(Exception) as caught:
        action()  # type: ignore[operator]
    return caught.value


def test_a_missing_table_is_classified_by_its_condition_not_by_words_in_its_path(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The path names a conflict's exception class: the text alone would say conflict, the
    error condition says the table is missing."""
    path = str(tmp_path / "ConcurrentAppendException" / "bronze")
    err = _failure_of(lambda: spark.read.format("delta").load(path).collect())

    facts = failure_facts(err)
    assert facts.conditions, facts.text[:500]
    assert RULES[0].matches_text(facts.text)  # the fallback would have been misled
    rule = rule_for(facts)
    assert rule is not None and rule.error is SourceNotFound
    ctx = ReadContext("people", path, 3, 5)
    classified = classify_read_failure(err, ctx)
    assert isinstance(classified, SourceNotFound)
    assert not isinstance(classified, ConcurrentWriteConflict)
    assert (classified.pipeline_id, classified.table, classified.version) == ("people", path, 3)


def test_a_vacuumed_change_file_inside_an_action_is_found_in_the_java_cause_chain(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A file missing at read time fails inside the action (often a raw Py4JJavaError): its
    condition is still read from the Java exception, and the read is a lost window."""
    path = str(tmp_path / "bronze")
    make_bronze(spark, path, [(1, "ada", 10), (2, "bob", 20)])
    for data_file in Path(path).glob("*.parquet"):
        data_file.unlink()
    frame = read_changes(spark, path, 1, 1)
    err = _failure_of(frame.collect)

    facts = failure_facts(err)
    assert any(c.startswith("FAILED_READ_FILE") for c in facts.conditions), facts.conditions
    classified = classify_read_failure(err, ReadContext(None, path, 1, 1))
    assert isinstance(classified, ReplayWindowLost)
    assert "bronze change feed (0, 1]" in str(classified)


def test_a_failure_no_rule_knows_stays_unknown_with_its_first_line() -> None:
    err = RuntimeError("the disk caught fire\nsecond line")
    classified = classify_read_failure(err, ReadContext("p", "/t", 4, 9))
    assert type(classified) is UnknownReadFailure
    assert "the disk caught fire" in str(classified)
    assert "second line" not in str(classified)


def test_a_raw_java_failure_is_told_by_the_java_exception_not_by_py4js_preamble(
    spark: SparkSession,
) -> None:
    """A raw Py4JJavaError's first line only names the JVM object called (`An error occurred
    while calling o132.sql.`); the message gives the Java exception's line after it."""
    err = _failure_of(lambda: spark._jvm.java.util.Optional.empty().get())  # type: ignore[union-attr]

    classified = classify_read_failure(err, ReadContext("p", "/t", 4, 9))
    assert type(classified) is UnknownReadFailure
    assert "java.util.NoSuchElementException: No value present" in str(classified)
    assert "An error occurred while calling" not in str(classified)


def test_a_failure_of_the_silver_write_names_the_write_not_a_read() -> None:
    """The MERGE is classified with the read's context (a lost window surfaces there), but a
    failure no rule knows says it was the MERGE into silver that failed."""
    doing = "merging bronze change feed (3, 9] into silver /lake/silver/p"
    classified = classify_read_failure(RuntimeError("gone"), ReadContext("p", "/t", 4, 9), doing)
    assert classified.problem == f"{doing} failed: RuntimeError: gone"


@pytest.mark.parametrize(
    ("ctx", "described"),
    [
        (ReadContext("p", "/t", 22, 22), "bronze change feed (21, 22]"),
        (ReadContext("p", "/t", 4, 9), "bronze change feed (3, 9]"),
        (ReadContext.at_version("p", "/t", 22), "bronze snapshot at version 22"),
    ],
)
def test_a_read_is_named_by_its_change_feed_range_or_its_snapshot_version(
    ctx: ReadContext, described: str
) -> None:
    classified = classify_read_failure(RuntimeError("gone"), ctx)
    assert classified.problem == f"reading {described} failed: RuntimeError: gone"


@pytest.mark.parametrize(
    ("condition", "error"),
    [
        ("DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT", ConcurrentWriteConflict),
        ("FAILED_READ_FILE.FILE_NOT_EXIST", ReplayWindowLost),
        ("DELTA_TRUNCATED_TRANSACTION_LOG", ReplayWindowLost),
        ("DELTA_MISSING_DELTA_TABLE", SourceNotFound),
    ],
)
def test_conditions_and_sub_conditions_map_to_their_rule(condition: str, error: type) -> None:
    matching = [rule for rule in RULES if rule.matches_condition(condition)]
    assert [rule.error for rule in matching] == [error]
