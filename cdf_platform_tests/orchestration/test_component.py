"""CdfPipelinesComponent: the example dg project (examples/dg_project) declares the demo's
pipelines in defs.yaml and gets the classic entry point's asset graph; `dg scaffold defs` writes
a defs.yaml that `dg check defs` and `dagster definitions validate` load; `dg check yaml` names a
misspelt pipeline field and its line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.component import COMPONENT_TYPE, CdfPipelinesComponent
from cdf_platform.orchestration.shared.resources import LakeLayout

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "dg_project"
BIN = Path(sys.executable).parent


def _shape(defs: dg.Definitions) -> dict[str, Any]:
    """What a user sees of a code location: assets with their upstreams, checks and freshness,
    jobs, schedules and sensors with their default status, resources."""
    graph = defs.resolve_asset_graph()
    assets = {}
    for key in graph.get_all_asset_keys():
        node = graph.get(key)
        policy = node.freshness_policy
        assets[key.to_user_string()] = (
            sorted(parent.to_user_string() for parent in node.parent_keys),
            sorted(check.name for check in node.check_keys),
            node.is_materializable,
            policy.fail_window.to_timedelta() if policy is not None else None,  # type: ignore[union-attr]
        )
    return {
        "assets": assets,
        "jobs": sorted(job.name for job in defs.jobs or []),  # type: ignore[union-attr]
        "schedules": sorted(
            (s.name, s.default_status.value)
            for s in defs.schedules or []  # type: ignore[union-attr]
        ),
        "sensors": sorted(
            (s.name, s.default_status.value)
            for s in defs.sensors or []  # type: ignore[union-attr]
        ),
        "resources": sorted(defs.resources or {}),
    }


def test_the_component_project_has_the_classic_entry_points_asset_graph(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CDF_LAKE_ROOT", str(tmp_path / "lake"))
    monkeypatch.delenv("CDF_CONTROL_ROOT", raising=False)
    monkeypatch.delenv("CDF_AUTOMATION", raising=False)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    component = dg.load_from_defs_folder(path_within_project=EXAMPLE / "cdf_example")
    layout = LakeLayout(
        lake_root=str(tmp_path / "lake"), pipelines_file=str(REPO / "pipelines.yaml")
    )
    classic = build_defs(layout)

    shape = _shape(component)
    assert shape == _shape(classic)
    assert shape["assets"]["silver/orders"][:2] == (
        ["bronze/orders"],
        ["consumer_lag", "foreign_writes", "replay_window"],
    )
    assert ("rebuild_sensor", "RUNNING") in shape["sensors"]
    assert ("checks_schedule", "RUNNING") in shape["schedules"]


def test_automation_can_be_turned_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CDF_AUTOMATION", "off")
    layout = LakeLayout(lake_root=str(tmp_path), pipelines_file=str(REPO / "pipelines.yaml"))
    shape = _shape(build_defs(layout))
    assert ("rebuild_sensor", "STOPPED") in shape["sensors"]
    assert ("checks_schedule", "STOPPED") in shape["schedules"]


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({}, "sets neither of `pipelines` and `pipelines_file`"),
        (
            {
                "pipelines": [{"id": "a", "source": "b", "target": "c", "keys": ["k"]}],
                "pipelines_file": "p.yaml",
            },
            "sets both",
        ),
        ({"pipelines": [{"id": "a", "source": "b", "target": "c"}]}, "keys: Field required"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_field(
    attributes: dict[str, Any], message: str
) -> None:
    component = CdfPipelinesComponent.resolve_from_dict(attributes)
    with pytest.raises(InvalidPipelineSpec, match=message):
        dg.build_defs_for_component(component)


def test_templates_render_in_the_typed_pipeline_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CDF_TEST_SOURCE", "bronze/customers")
    monkeypatch.setenv("CDF_TEST_DELETE_MODE", "soft")
    component = CdfPipelinesComponent.resolve_from_yaml(
        """
pipelines:
  - id: customers
    source: "{{ env.CDF_TEST_SOURCE }}"
    target: silver/customers
    keys: [customer_id]
    delete_mode: "{{ env.CDF_TEST_DELETE_MODE }}"
"""
    )
    assert component.pipelines == [
        {
            "id": "customers",
            "source": "bronze/customers",
            "target": "silver/customers",
            "keys": ["customer_id"],
            "delete_mode": "soft",
        }
    ]


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"},
    )


def _example_project(tmp_path: Path) -> Path:
    """A copy of the example dg project under `tmp_path`."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    return project


def test_dg_scaffolds_a_defs_yaml_that_dagster_validates(tmp_path: Path) -> None:
    project = _example_project(tmp_path)
    shutil.rmtree(project / "cdf_example" / "defs" / "pipelines")

    scaffolded = _run(
        [str(BIN / "dg"), "scaffold", "defs", COMPONENT_TYPE, "lake_pipelines"], project
    )
    assert scaffolded.returncode == 0, scaffolded.stderr
    written = (project / "cdf_example" / "defs" / "lake_pipelines" / "defs.yaml").read_text()
    assert f"type: {COMPONENT_TYPE}" in written
    assert "id: orders" in written

    checked = _run([str(BIN / "dg"), "check", "defs"], project)
    output = checked.stdout + checked.stderr
    assert checked.returncode == 0, output
    assert "All component YAML validated successfully" in output
    assert "All definitions loaded successfully" in output
    validate = [str(BIN / "dagster"), "definitions", "validate", "-w", "workspace.yaml"]
    validated = _run(validate, project)
    assert validated.returncode == 0, validated.stdout + validated.stderr


def test_dg_check_yaml_names_a_misspelt_pipeline_field_and_its_line(tmp_path: Path) -> None:
    project = _example_project(tmp_path)
    defs_yaml = project / "cdf_example" / "defs" / "pipelines" / "defs.yaml"
    lines = defs_yaml.read_text().splitlines()
    index = lines.index("      keys: [customer_id]")  # the second pipeline's keys
    lines[index] = "      keyz: [customer_id]"
    defs_yaml.write_text("\n".join(lines) + "\n")

    checked = _run([str(BIN / "dg"), "check", "yaml"], project)
    output = checked.stdout + checked.stderr
    assert checked.returncode == 1, output
    assert f"defs.yaml:{index + 1} - {COMPONENT_TYPE} attributes.pipelines.1.keyz" in output
    assert "('keyz' was unexpected)" in output
