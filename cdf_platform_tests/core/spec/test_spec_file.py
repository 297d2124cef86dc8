"""The pipelines file: parsed with the safe loader (no Python objects), a syntax error refused
with the line to fix, and parsed once per text by whoever keeps its documents (`ParsedFiles`)."""

from pathlib import Path

import pytest

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.spec import spec_file
from cdf_platform.core.spec.spec_file import ParsedFiles, load_alerts, load_specs, load_storage

PIPELINE = (
    "pipelines:\n  - {id: orders, source: bronze/orders, target: silver/orders, keys: [id]}\n"
)


def test_a_pipelines_file_parses_into_its_specs(tmp_path: Path) -> None:
    path = tmp_path / "pipelines.yaml"
    path.write_text(PIPELINE, encoding="utf-8")
    (spec,) = load_specs(path, lake_root="/lake")
    assert (spec.id, spec.source, spec.keys) == ("orders", "/lake/bronze/orders", ["id"])


def test_a_yaml_syntax_error_is_refused_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "pipelines.yaml"
    path.write_text(PIPELINE + "  - {id: broken, keys: [id\n", encoding="utf-8")
    with pytest.raises(InvalidPipelineSpec, match=r"(?s)is not valid YAML: .*line 3") as refused:
        load_specs(path)
    assert str(path) in str(refused.value)


def test_a_python_object_tag_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pipelines.yaml"
    path.write_text("pipelines: !!python/object/apply:os.getcwd []\n", encoding="utf-8")
    with pytest.raises(InvalidPipelineSpec, match="is not valid YAML"):
        load_specs(path)


def test_a_file_read_for_each_section_is_parsed_once_per_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "pipelines.yaml"
    path.write_text(PIPELINE, encoding="utf-8")
    parses: list[str] = []
    parse = spec_file._parse
    monkeypatch.setattr(
        spec_file, "_parse", lambda text, file: parses.append(text) or parse(text, file)
    )
    parsed = ParsedFiles()
    load_storage(path, parsed=parsed)
    load_specs(path, parsed=parsed)
    assert load_alerts(path, parsed=parsed) is None
    assert len(parses) == 1
    path.write_text(PIPELINE.replace("orders", "sales"), encoding="utf-8")
    (spec,) = load_specs(path, parsed=parsed)
    assert spec.id == "sales" and len(parses) == 2
    # Without a keeper, each read parses.
    load_specs(path)
    assert len(parses) == 3
