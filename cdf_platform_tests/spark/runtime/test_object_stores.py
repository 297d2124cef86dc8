"""Object-store connectors: only the stores a session's locations name, configured from the
environment deltalake and obstore read, with the configured options of each bucket or account
on top."""

from __future__ import annotations

import os
import signal

import pytest

from cdf_platform.core.errors import InvalidStorageConfig
from cdf_platform.core.storage import StorageConfig
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform.spark.runtime.object_stores import (
    AWS_SDK_BUNDLE,
    S3A_CREDENTIALS,
    object_store_conf,
    object_store_schemes,
    storage_hadoop_conf,
)
from cdf_platform.spark.runtime.session_conf import SparkSettings, spark_conf
from cdf_platform_testkit.processes import descendants


def test_a_local_lake_loads_no_connector(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    conf = spark_conf(SparkSettings(storage_locations=("/lake", "file:///lake/_control")))
    assert conf["spark.jars.packages"].split(",") == [conf["spark.jars.packages"]]
    assert "io.delta:delta-spark" in conf["spark.jars.packages"]
    assert not [key for key in conf if "s3a" in key or ".s3." in key]


@pytest.mark.parametrize("lake", ["s3://bucket/lake", "s3a://bucket/lake"])
def test_an_s3_lake_gets_s3a_without_the_sdk_bundle(
    lake: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    conf = spark_conf(SparkSettings(storage_locations=("/local", lake)))
    packages = conf["spark.jars.packages"].split(",")
    assert packages[1:] == [
        "org.apache.hadoop:hadoop-aws:3.5.0",
        "software.amazon.awssdk:s3:2.35.4",
        "software.amazon.awssdk:s3-transfer-manager:2.35.4",
    ]
    assert AWS_SDK_BUNDLE in conf["spark.jars.excludes"].split(",")
    # s3:// is S3A too; no endpoint set, so AWS's own (and no path-style override).
    assert conf["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert "spark.hadoop.fs.s3a.endpoint" not in conf
    assert "spark.hadoop.fs.s3a.path.style.access" not in conf


def test_the_endpoint_and_region_come_from_the_aws_environment() -> None:
    local = object_store_conf(
        {"s3"}, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1"}
    ).conf
    assert local["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert local["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert local["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert local["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    hosted = object_store_conf(
        {"s3a"},
        {"AWS_ENDPOINT_URL": "https://s3.example", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true"},
    ).conf
    assert hosted["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "true"
    assert hosted["spark.hadoop.fs.s3a.path.style.access"] == "false"
    # Credentials stay with S3A's provider chain: never copied into the Spark conf.
    secret = object_store_conf({"s3"}, {"AWS_SECRET_ACCESS_KEY": "hush"}).conf
    assert "hush" not in secret.values()


def test_schemes_of_locations() -> None:
    locations = ["/lake", "file:///x", "s3a://b/x", "abfss://c@a.dfs.core.windows.net/x", "gs://b"]
    assert object_store_schemes(locations) == {"s3a", "abfss", "gs"}
    packages = object_store_conf({"abfss", "gs"}, {}).packages
    assert [p.split(":")[1] for p in packages] == ["hadoop-azure", "gcs-connector"]


def test_configured_options_become_s3a_per_bucket_conf() -> None:
    storage = StorageConfig.parse(
        {
            "s3://lake-a": {
                "endpoint": "http://127.0.0.1:9001",
                "allow_http": True,
                "region": "r-a",
                "access_key_id": "ka",
                "secret_access_key": "sa",
            },
            "s3a://lake-b/silver": {
                "endpoint": "https://s3.example",
                "virtual_hosted_style_request": True,
                "access_key_id": "kb",
                "secret_access_key": "sb",
                "session_token": "tb",
            },
            "s3://public": {"skip_signature": True},
            "gs://gcs-bucket": {"service_account_path": "/keys/sa.json"},
        },
        origin="pipelines.yaml",
    )
    assert storage_hadoop_conf(storage) == {
        "fs.s3a.bucket.lake-a.endpoint": "http://127.0.0.1:9001",
        "fs.s3a.bucket.lake-a.connection.ssl.enabled": "false",
        "fs.s3a.bucket.lake-a.path.style.access": "true",
        "fs.s3a.bucket.lake-a.endpoint.region": "r-a",
        "fs.s3a.bucket.lake-a.access.key": "ka",
        "fs.s3a.bucket.lake-a.secret.key": "sa",
        "fs.s3a.bucket.lake-a.aws.credentials.provider": S3A_CREDENTIALS["static"],
        "fs.s3a.bucket.lake-b.endpoint": "https://s3.example",
        "fs.s3a.bucket.lake-b.connection.ssl.enabled": "true",
        "fs.s3a.bucket.lake-b.path.style.access": "false",
        "fs.s3a.bucket.lake-b.access.key": "kb",
        "fs.s3a.bucket.lake-b.secret.key": "sb",
        "fs.s3a.bucket.lake-b.session.token": "tb",
        "fs.s3a.bucket.lake-b.aws.credentials.provider": S3A_CREDENTIALS["temporary"],
        "fs.s3a.bucket.public.aws.credentials.provider": S3A_CREDENTIALS["anonymous"],
        # GCS: the gcs-connector has no per-bucket credentials; nothing is mapped.
    }
    conf = object_store_conf({"s3"}, {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, storage).conf
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9"  # other buckets
    assert conf["spark.hadoop.fs.s3a.bucket.lake-a.endpoint"] == "http://127.0.0.1:9001"


def test_configured_options_become_abfs_per_account_conf() -> None:
    storage = StorageConfig.parse(
        {
            "abfss://silver@one.dfs.core.windows.net/lake": {"account_key": "k1"},
            "abfss://gold@two.dfs.core.windows.net": {"sas_token": "sv=1&sig=x"},
            "abfs://bronze@three.dfs.core.windows.net": {
                "client_id": "id",
                "client_secret": "secret",
                "tenant_id": "tenant",
            },
            "az://container": {"account_name": "four", "endpoint": "http://127.0.0.1:10000"},
        },
        origin="pipelines.yaml",
    )
    conf = storage_hadoop_conf(storage)
    one, two, three = (f"{name}.dfs.core.windows.net" for name in ("one", "two", "three"))
    assert conf[f"fs.azure.account.key.{one}"] == "k1"
    assert conf[f"fs.azure.account.auth.type.{two}"] == "SAS"
    assert conf[f"fs.azure.sas.fixed.token.{two}"] == "sv=1&sig=x"
    assert conf[f"fs.azure.account.auth.type.{three}"] == "OAuth"
    assert conf[f"fs.azure.account.oauth2.client.endpoint.{three}"] == (
        "https://login.microsoftonline.com/tenant/oauth2/token"
    )
    assert not [key for key in conf if "four" in key]  # az:// is not Spark's


def test_two_prefixes_of_one_bucket_must_agree_for_spark() -> None:
    storage = StorageConfig.parse(
        {"s3://lake-a/x": {"region": "r1"}, "s3://lake-a/y": {"region": "r2"}},
        origin="pipelines.yaml",
    )
    with pytest.raises(InvalidStorageConfig, match="per bucket"):
        storage_hadoop_conf(storage)


def test_a_session_gets_the_connectors_and_options_of_its_lake_configuration() -> None:
    storage = StorageConfig.parse(
        {"s3://lake-b": {"endpoint": "http://127.0.0.1:9002"}}, origin="pipelines.yaml"
    )
    conf = spark_conf(SparkSettings(storage_locations=("/lake",), storage=storage))
    # A catalog table may live on a configured bucket no path names: its connector is loaded.
    assert "org.apache.hadoop:hadoop-aws:3.5.0" in conf["spark.jars.packages"].split(",")
    assert conf["spark.hadoop.fs.s3a.bucket.lake-b.endpoint"] == "http://127.0.0.1:9002"


def test_the_local_s3_server_is_stopped_by_its_pid() -> None:
    server = LocalS3Server(bucket="stop-test").start()
    process = server.service.process
    assert process is not None and process.poll() is None
    workers = list(descendants(process.pid))
    assert workers  # granian serves from a worker process
    assert server.request_count() >= 1  # the bucket was created through it
    server.stop()
    assert process.poll() is not None
    for pid in [process.pid, *workers]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    assert not server.log_path.exists()
