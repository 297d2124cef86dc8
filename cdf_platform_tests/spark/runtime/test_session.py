"""The Delta-configured SparkSession: coordinates, Java check, CDF round trip, unsafe conf,
storage options on a reused session."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import RuntimeEnvironmentError, UnsafeSparkConfig
from cdf_platform.core.sql import sql_path
from cdf_platform.core.storage import StorageConfig
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.spark.runtime import session as session_mod
from cdf_platform.spark.runtime.session import (
    assert_safe_spark_config,
    build_spark_session,
    java_major_version,
    require_java,
)
from cdf_platform.spark.runtime.session_conf import (
    SparkSettings,
    delta_maven_coordinate,
    local_cores,
    spark_conf,
)


def test_delta_coordinate_matches_installed_spark_and_delta() -> None:
    import importlib.metadata

    spark_minor = ".".join(importlib.metadata.version("pyspark").split(".")[:2])
    delta = importlib.metadata.version("delta-spark")
    assert delta_maven_coordinate() == f"io.delta:delta-spark_{spark_minor}_2.13:{delta}"


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[4, 2]", 4),
        ("spark://host:7077", None),
        ("yarn", None),
    ],
)
def test_local_masters_get_delta_parallelism_sized_to_their_cores(
    master: str, cores: int | None
) -> None:
    assert local_cores(master) == cores
    conf = spark_conf(SparkSettings(master=master))
    expected = None if cores is None else str(max(2, cores))
    assert conf.get("spark.databricks.delta.snapshotPartitions") == expected
    assert conf.get("spark.sql.sources.parallelPartitionDiscovery.parallelism") == expected
    given = SparkSettings(
        master=master, extra_conf={"spark.databricks.delta.snapshotPartitions": "64"}
    )
    assert spark_conf(given)["spark.databricks.delta.snapshotPartitions"] == "64"


def test_object_store_conf_reads_the_environment_at_call_time_and_extra_conf_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = SparkSettings(
        storage_locations=("s3n://bucket/lake",),
        extra_conf={"spark.hadoop.fs.s3a.endpoint.region": "eu-central-1"},
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    first = spark_conf(settings)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    second = spark_conf(settings)
    assert first["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:1"
    assert second["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:2"
    assert second["spark.hadoop.fs.s3a.endpoint.region"] == "eu-central-1"
    # Hadoop 3 dropped its s3n filesystem: the scheme is S3A's, like s3.
    assert second["spark.hadoop.fs.s3n.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert "org.apache.hadoop:hadoop-client-api" in second["spark.jars.excludes"].split(",")


@pytest.mark.parametrize(("virtual", "path_style"), [("false", "true"), ("TRUE", "false")])
def test_an_explicit_addressing_style_holds_without_an_endpoint(
    virtual: str, path_style: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", virtual)
    conf = spark_conf(SparkSettings(storage_locations=("s3://bucket/lake",)))
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == path_style
    assert "spark.hadoop.fs.s3a.endpoint" not in conf


def test_java_17_or_newer_is_present() -> None:
    assert require_java() >= 17


def _fake_java(folder: Path, version_line: str) -> str:
    """A `java` executable that prints `version_line` the way `java -version` does."""
    folder.mkdir(parents=True, exist_ok=True)
    java = folder / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return str(java)


def test_java_versions_are_parsed(tmp_path: Path) -> None:
    assert java_major_version(_fake_java(tmp_path / "a", 'openjdk version "21.0.4"')) == 21
    assert java_major_version(_fake_java(tmp_path / "b", 'java version "1.8.0_292"')) == 8


def test_old_java_is_refused_with_a_clear_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_java(tmp_path / "jdk11" / "bin", 'openjdk version "11.0.2" 2019-01-15')
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk11"))
    with pytest.raises(RuntimeEnvironmentError, match=r"Java 11 found.*Java 17"):
        session_mod.require_java()


def test_missing_java_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(RuntimeEnvironmentError, match="no Java runtime found"):
        session_mod.require_java()


def test_cdf_roundtrip_through_the_resource_session(spark: SparkSession, lake: Path) -> None:
    """Insert, UPDATE, DELETE on a CDF table; the pinned-range change feed has exact rows."""
    path = str(lake / "people")
    table = sql_path(path)
    spark.sql(
        f"CREATE TABLE {table} (id INT, name STRING) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    spark.sql(f"INSERT INTO {table} VALUES (1, 'ada'), (2, 'bob'), (3, 'cy')")
    spark.sql(f"UPDATE {table} SET name = 'ada2' WHERE id = 1")
    spark.sql(f"DELETE FROM {table} WHERE id = 2")
    spark.sql(f"INSERT INTO {table} VALUES (4, 'dee')")  # version 4: outside the pinned range

    rows = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 1)
        .option("endingVersion", 3)
        .load(path)
        .select("id", "name", "_change_type", "_commit_version")
        .collect()
    )
    assert sorted(tuple(r) for r in rows) == [
        (1, "ada", "insert", 1),
        (1, "ada", "update_preimage", 2),
        (1, "ada2", "update_postimage", 2),
        (2, "bob", "delete", 3),
        (2, "bob", "insert", 1),
        (3, "cy", "insert", 1),
    ]


def test_session_that_ignores_missing_files_is_refused(spark: SparkSession) -> None:
    assert_safe_spark_config(spark)
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        with pytest.raises(UnsafeSparkConfig, match="ignoreMissingFiles=true"):
            assert_safe_spark_config(spark)
    finally:
        spark.conf.unset("spark.sql.files.ignoreMissingFiles")
    assert_safe_spark_config(spark)


def test_a_reused_session_gets_the_storage_options_and_spark_config_still_wins(
    spark: SparkSession, spark_resource: SparkResource
) -> None:
    """A session the platform reuses (its context started before a lake's options reached
    it) gets them in its Hadoop conf; a `spark.hadoop.*` of `spark_config` keeps its value."""
    scoped = "fs.s3a.bucket.reused-lake"
    storage = StorageConfig.parse(
        {"s3://reused-lake": {"endpoint": "http://127.0.0.1:9", "region": "r-options"}},
        origin="pipelines.yaml",
    )
    settings = spark_resource.settings()
    pinned = {**settings.extra_conf, f"spark.hadoop.{scoped}.endpoint.region": "r-spark-config"}
    session = build_spark_session(replace(settings, extra_conf=pinned, storage=storage))
    assert session.sparkContext is spark.sparkContext
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    assert hadoop.get(f"{scoped}.endpoint") == "http://127.0.0.1:9"
    assert hadoop.get(f"{scoped}.endpoint.region") == "r-spark-config"
