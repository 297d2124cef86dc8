"""Roots and locations are resolved once: a local one to its absolute path, a URI as given."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdf_platform.core.config import LakeEnvironment, resolve_root
from cdf_platform.core.spec.pipeline_spec import PipelineSpec


@pytest.mark.parametrize(
    ("root", "resolved"),
    [
        ("w/lake", "{cwd}/w/lake"),
        ("./w/../lake/", "{cwd}/lake"),
        ("/data/lake", "/data/lake"),
        ("s3://bucket/lake", "s3://bucket/lake"),
        (
            "abfss://c@account.dfs.core.windows.net/lake",
            "abfss://c@account.dfs.core.windows.net/lake",
        ),
    ],
)
def test_resolve_root(root: str, resolved: str) -> None:
    assert resolve_root(root) == resolved.format(cwd=Path.cwd())


def test_relative_locations_end_absolute_under_any_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative under an absolute root, relative under a relative root, and the environment's
    relative roots: every local location is absolute; absolute paths, URIs and catalog names
    are left as they are."""
    monkeypatch.chdir(tmp_path)
    spec = PipelineSpec(id="m", source="./bronze/m", target="silver/../silver/m", keys=["id"])
    for root in (str(tmp_path / "w" / "lake"), "w/lake"):
        resolved = spec.resolved(root)
        assert (resolved.source, resolved.target) == (
            str(tmp_path / "w" / "lake" / "bronze" / "m"),
            str(tmp_path / "w" / "lake" / "silver" / "m"),
        )
    kept = PipelineSpec(id="m", source="/data/bronze", target="main.silver.m", keys=["id"])
    assert kept.resolved("w/lake") == kept
    assert (
        PipelineSpec(id="m", source="b", target="s", keys=["id"])
        .resolved("s3://bucket/lake")
        .source
        == "s3://bucket/lake/b"
    )

    monkeypatch.setenv("CDF_LAKE_ROOT", "w/lake")
    monkeypatch.delenv("CDF_CONTROL_ROOT", raising=False)
    env = LakeEnvironment.resolve()
    assert (env.lake_root.value, env.lake_root.variable) == (
        str(tmp_path / "w/lake"),
        "CDF_LAKE_ROOT",
    )
    assert env.control_root_path == str(tmp_path / "w" / "lake" / "_control")
    monkeypatch.setenv("CDF_CONTROL_ROOT", "w/control")
    assert LakeEnvironment.resolve().control_root_path == str(tmp_path / "w" / "control")
    # A value given (a command-line flag) wins over the variable.
    given = LakeEnvironment.resolve(lake_root="/data/lake", control_root="s3://b/c")
    assert (given.lake_root.value, given.control_root_path) == ("/data/lake", "s3://b/c")
