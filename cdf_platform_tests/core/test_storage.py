"""Storage options by location prefix: the longest prefix wins at a path boundary, secrets are
environment references read when the configuration is resolved, and every malformed entry is an
`InvalidStorageConfig` naming what to fix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from cdf_platform.core.cloud_options import OPTION_KEYS, EnvRef, StoreKind, StoreOptions
from cdf_platform.core.errors import InvalidPipelineSpec, InvalidStorageConfig
from cdf_platform.core.spec.spec_file import load_specs, load_storage
from cdf_platform.core.storage import StorageConfig

SECTION: dict[str, Any] = {
    "s3://lake-a": {"endpoint": "http://127.0.0.1:9001", "allow_http": True, "region": "r-a"},
    "s3a://lake-a/special/": {"endpoint": "http://127.0.0.1:9002"},
    "abfss://silver@acct.dfs.core.windows.net": {"account_key": {"env": "ACCT_KEY"}},
}


def _config(section: dict[str, Any] = SECTION) -> StorageConfig:
    return StorageConfig.parse(section, origin="pipelines.yaml")


@pytest.mark.parametrize(
    ("location", "prefix"),
    [
        ("s3://lake-a/bronze/orders", "s3://lake-a"),
        ("s3a://lake-a", "s3://lake-a"),
        ("s3n://lake-a/special", "s3a://lake-a/special"),
        ("s3://lake-a/special/orders", "s3a://lake-a/special"),
        ("s3://lake-a/specialist/orders", "s3://lake-a"),  # a path boundary, not a string prefix
        ("abfs://silver@acct.dfs.core.windows.net/t", "abfss://silver@acct.dfs.core.windows.net"),
        ("s3://lake-ab/orders", None),
        ("s3://other/orders", None),
        ("/lake/bronze/orders", None),
        ("file:///lake/bronze/orders", None),
    ],
)
def test_the_longest_matching_prefix_wins(location: str, prefix: str | None) -> None:
    entry = _config().entry_for(location)
    assert (entry.prefix if entry else None) == prefix


def test_options_map_to_each_readers_keys() -> None:
    config = _config().resolved({"ACCT_KEY": "k3y"})
    s3 = config.entry_for("s3://lake-a/x")
    assert s3 is not None and s3.store is StoreKind.S3
    assert s3.deltalake_options() == {
        "aws_endpoint": "http://127.0.0.1:9001",
        "allow_http": "true",
        "aws_region": "r-a",
    }
    # obstore takes allow_http as an HTTP client option, not a store config key.
    assert s3.obstore_config() == {"endpoint": "http://127.0.0.1:9001", "region": "r-a"}
    assert s3.obstore_client_options() == {"allow_http": True}
    azure = config.entry_for("abfss://silver@acct.dfs.core.windows.net/t")
    assert azure is not None
    assert azure.deltalake_options() == {"azure_storage_account_key": "k3y"}
    assert "k3y" not in azure.describe()


def test_every_option_has_its_keys_and_a_description() -> None:
    assert list(OPTION_KEYS) == list(StoreOptions.model_fields)
    for name, field in StoreOptions.model_fields.items():
        assert field.description, name
        assert OPTION_KEYS[name].deltalake, name
        assert field.repr is not OPTION_KEYS[name].secret, name  # secrets stay out of reprs
    assert "hush" not in repr(StoreOptions(secret_access_key="hush", session_token="hush"))


def test_environment_references_are_read_when_the_configuration_is_resolved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = _config()
    unread = config.entry_for("abfss://silver@acct.dfs.core.windows.net/t")
    assert unread is not None and unread.options.account_key == EnvRef(env="ACCT_KEY")
    monkeypatch.setenv("ACCT_KEY", "from-the-environment")
    entry = config.resolved(os.environ).entry_for("abfss://silver@acct.dfs.core.windows.net/t")
    assert entry is not None
    assert entry.deltalake_options()["azure_storage_account_key"] == "from-the-environment"


def test_a_missing_environment_variable_names_prefix_option_and_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ACCT_KEY", raising=False)
    with pytest.raises(InvalidStorageConfig) as caught:
        _config().resolved(os.environ)
    message = str(caught.value)
    assert "abfss://silver@acct.dfs.core.windows.net (pipelines.yaml)" in message
    assert "`account_key`" in message and "ACCT_KEY, which is not set" in message
    assert "What to do: set ACCT_KEY" in message


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"s3://a": {"endpont": "x"}}, "unknown option `endpont`; S3 takes: endpoint, region"),
        ({"s3://a": {"account_key": "x"}}, "`account_key` is not an option of S3 locations"),
        ({"gs://a": {"region": "x"}}, "`region` is not an option of GCS locations"),
        ({"hdfs://nn/lake": {"endpoint": "x"}}, "unknown scheme `hdfs`"),
        ({"/lake": {"endpoint": "x"}}, "has no scheme"),
        ({"s3://": {"endpoint": "x"}}, "names no bucket or container"),
        ({"s3://a": {"allow_http": "perhaps"}}, "allow_http: Input should be a valid boolean"),
        ({"s3://a": {"secret_access_key": {"environment": "X"}}}, "secret_access_key"),
        ({"s3://a": "endpoint=x"}, "must map to a mapping of options"),
        ({"s3://a": {}, "s3a://a/": {}}, "storage prefix s3a://a is configured twice"),
        (["s3://a"], "must map location prefixes to their options"),
    ],
)
def test_bad_storage_configuration_is_classified(section: Any, expected: str) -> None:
    with pytest.raises(InvalidStorageConfig) as caught:
        StorageConfig.parse(section, origin="pipelines.yaml")
    assert expected in str(caught.value)
    assert caught.value.incident_code == "INVALID_STORAGE_CONFIG"


def test_a_prefix_configured_in_two_places_is_refused() -> None:
    from_file = StorageConfig.parse({"s3://a": {"region": "x"}}, origin="pipelines.yaml")
    from_resource = StorageConfig.of(
        {"s3a://a": StoreOptions(region="y")}, origin="the lake resource's storage"
    )
    with pytest.raises(InvalidStorageConfig, match=r"in pipelines\.yaml and in the lake resource"):
        from_file.merged(from_resource)


def test_the_pipelines_file_carries_a_storage_section(tmp_path: Path) -> None:
    file = tmp_path / "pipelines.yaml"
    pipeline = {"id": "p", "source": "s3://lake-a/b", "target": "s3://lake-b/s", "keys": ["id"]}
    file.write_text(yaml.safe_dump({"pipelines": [pipeline], "storage": SECTION}))
    assert [spec.id for spec in load_specs(file)] == ["p"]
    assert sorted(load_storage(file).prefixes) == sorted(p.rstrip("/") for p in SECTION)

    file.write_text(yaml.safe_dump({"pipelines": [pipeline], "stores": SECTION}))
    with pytest.raises(InvalidPipelineSpec, match=r"unknown top-level keys \['stores'\]"):
        load_specs(file)
    file.write_text(yaml.safe_dump({"pipelines": [pipeline], "storage": {"s3://a": {"x": 1}}}))
    with pytest.raises(InvalidStorageConfig, match=f"storage prefix s3://a \\({file}\\)"):
        load_storage(file)
