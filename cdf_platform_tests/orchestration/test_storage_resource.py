"""Storage options on the `lake` resource: typed per prefix beside the pipelines file's
`storage:` section, secrets as `dg.EnvVar`, read into the resource's `Lake` (whose control
table carries them to every reader) when a run initialises it, and a missing variable or a
prefix configured twice is an `InvalidStorageConfig`."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from cdf_platform.core.cloud_options import EnvRef, StoreOptions
from cdf_platform.core.errors import InvalidPipelineSpec, InvalidStorageConfig
from cdf_platform.core.spec import spec_file
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.storage_options_config import StorageOptionsConfig

PIPELINE = {"id": "p", "source": "s3://lake-a/bronze/p", "target": "s3://lake-b/p", "keys": ["id"]}


def _layout(tmp_path: Path, **storage: StorageOptionsConfig) -> LakeLayout:
    file = tmp_path / "pipelines.yaml"
    section = {"s3://lake-a": {"endpoint": "http://127.0.0.1:9001", "allow_http": True}}
    file.write_text(yaml.safe_dump({"pipelines": [PIPELINE], "storage": section}))
    return LakeLayout(lake_root="s3://lake-a/lake", pipelines_file=str(file), storage=storage)


def _lake_b(secret: str | dg.EnvVar) -> dict[str, StorageOptionsConfig]:
    return {
        "s3://lake-b": StorageOptionsConfig(
            endpoint="http://127.0.0.1:9002", access_key_id="kb", secret_access_key=secret
        )
    }


def test_the_config_class_offers_every_option() -> None:
    assert list(StorageOptionsConfig.model_fields) == list(StoreOptions.model_fields)
    for name, field in StorageOptionsConfig.model_fields.items():
        assert field.description == StoreOptions.model_fields[name].description
        assert field.repr is StoreOptions.model_fields[name].repr  # secrets stay out of reprs


def test_resource_and_file_options_are_one_configuration_with_env_vars_read_late(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = _layout(tmp_path, **_lake_b(dg.EnvVar("LAKE_B_SECRET")))
    config = layout.storage_config()
    assert sorted(config.prefixes) == ["s3://lake-a", "s3://lake-b"]
    lake_b = config.entry_for("s3://lake-b/p")
    assert lake_b is not None and lake_b.options.secret_access_key == EnvRef(env="LAKE_B_SECRET")

    monkeypatch.setenv("LAKE_B_SECRET", "sb")
    bound = layout.bound()
    assert bound.storage["s3://lake-b"].secret_access_key == "sb"
    assert isinstance(layout.storage["s3://lake-b"].secret_access_key, dg.EnvVar)
    storage = layout.control().storage  # the lake's, read now, carried by its control table
    lake_b = storage.entry_for("s3a://lake-b/p")
    assert lake_b is not None and lake_b.deltalake_options()["aws_secret_access_key"] == "sb"
    lake_a = storage.entry_for("s3://lake-a/bronze/p")
    assert lake_a is not None and lake_a.origin == str(tmp_path / "pipelines.yaml")
    # What the resource gives the Spark resource it builds keeps the reference, not the value.
    config = StorageOptionsConfig.of_config(layout.storage_config())
    assert config["s3://lake-b"].secret_access_key == dg.EnvVar("LAKE_B_SECRET")


def test_a_missing_env_var_of_the_resource_is_classified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKE_B_SECRET", raising=False)
    layout = _layout(tmp_path, **_lake_b(dg.EnvVar("LAKE_B_SECRET")))
    with pytest.raises(InvalidStorageConfig) as caught:
        layout.bound()
    assert "storage prefix s3://lake-b (the lake resource's storage)" in str(caught.value)
    assert "LAKE_B_SECRET, which is not set" in str(caught.value)


def test_a_missing_env_var_of_a_root_is_classified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LAKE_ROOT_UNSET", raising=False)
    layout = LakeLayout(lake_root=dg.EnvVar("LAKE_ROOT_UNSET"))
    with pytest.raises(InvalidPipelineSpec) as caught:
        layout.bound()
    assert "lake_root reads $LAKE_ROOT_UNSET, which is not set" in str(caught.value)
    monkeypatch.setenv("LAKE_ROOT_UNSET", str(tmp_path / "lake"))
    assert layout.bound().lake_root == str(tmp_path / "lake")


def test_a_prefix_in_the_file_and_the_resource_is_refused(tmp_path: Path) -> None:
    twice = _layout(tmp_path, **{"s3a://lake-a/": StorageOptionsConfig(region="eu-west-1")})
    with pytest.raises(InvalidStorageConfig, match="s3a://lake-a is configured twice"):
        twice.storage_config()
    wrong_store = _layout(tmp_path, **{"gs://b": StorageOptionsConfig(region="eu-west-1")})
    with pytest.raises(InvalidStorageConfig, match="`region` is not an option of GCS"):
        wrong_store.storage_config()


def test_a_run_reads_the_lake_options_from_its_resource(tmp_path: Path) -> None:
    @dg.asset
    def endpoints(lake: LakeLayout) -> dg.MaterializeResult:
        storage = lake.control().storage
        seen = {bucket: storage.entry_for(f"s3://{bucket}/t") for bucket in ("lake-a", "lake-b")}
        return dg.MaterializeResult(
            metadata={b: str(e.options.endpoint) if e else "none" for b, e in seen.items()}
        )

    result = dg.materialize([endpoints], resources={"lake": _layout(tmp_path, **_lake_b("sb"))})
    (materialization,) = result.asset_materializations_for_node("endpoints")
    assert {k: v.value for k, v in materialization.metadata.items()} == {
        "lake-a": "http://127.0.0.1:9001",
        "lake-b": "http://127.0.0.1:9002",
    }


def test_every_run_of_the_lake_resource_parses_the_pipelines_file_once_per_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = _layout(tmp_path)
    parses: list[str] = []
    parse = spec_file._parse
    monkeypatch.setattr(
        spec_file, "_parse", lambda text, file: parses.append(text) or parse(text, file)
    )

    @dg.asset
    def pipelines(lake: LakeLayout) -> dg.MaterializeResult:
        return dg.MaterializeResult(metadata={"ids": ",".join(s.id for s in lake.specs())})

    assert [spec.id for spec in layout.lake().specs()] == ["p"]  # the definitions' load
    for _ in range(2):  # each run initialises its own copy of the resource
        assert dg.materialize([pipelines], resources={"lake": layout}).success
    assert len(parses) == 1
    file = Path(str(layout.pipelines_file))
    file.write_text(file.read_text().replace("id: p", "id: q"))
    result = dg.materialize([pipelines], resources={"lake": layout})
    (materialization,) = result.asset_materializations_for_node("pipelines")
    assert materialization.metadata["ids"].value == "q" and len(parses) == 2
