"""The `lake` resource on relative roots: resolved once to absolute paths (literal config or
`EnvVar`s), a silver materialization on it works, and a run failing outside the platform's
classifier fails the step as a classified error."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.cli import build_parser
from cdf_platform.cli.commands import lake_context as cli_context
from cdf_platform.definitions import build_defs
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import make_bronze, rows
from cdf_platform_tests.lake_platform import materialization, materialize

PIPELINES = "pipelines:\n  - id: m\n    source: bronze/m\n    target: silver/m\n    keys: [id]\n"
SILVER_M = silver_key("m")


def _relative_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`w/` under `tmp_path`, the working directory from now on, with its pipelines file."""
    work = tmp_path / "w"
    work.mkdir()
    (work / "pipelines.yaml").write_text(PIPELINES)
    monkeypatch.chdir(tmp_path)
    return work


def test_a_relative_lake_layout_resolves_once_to_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = _relative_lake(tmp_path, monkeypatch)
    literal = LakeLayout(
        lake_root="w/lake", control_root="w/control", pipelines_file="w/pipelines.yaml"
    )
    for variable, value in (
        ("CDF_LAKE_ROOT", "w/lake"),
        ("CDF_CONTROL_ROOT", "w/control"),
        ("CDF_PIPELINES_FILE", "w/pipelines.yaml"),
    ):
        monkeypatch.setenv(variable, value)
    from_environment = LakeLayout.from_environment()
    # Until a run reads it, the field is the variable, not a path.
    assert isinstance(from_environment.lake_root, dg.EnvVar)

    for layout in (literal, literal.bound(), from_environment.bound()):
        assert (layout.lake_root, layout.control_root, layout.pipelines_file) == (
            str(work / "lake"),
            str(work / "control"),
            str(work / "pipelines.yaml"),
        )
        assert layout.control().root == str(work / "control")
        (spec,) = layout.specs()
        assert (spec.source, spec.target) == (
            str(work / "lake" / "bronze" / "m"),
            str(work / "lake" / "silver" / "m"),
        )
    # The command line resolves the same environment the same way.
    specs, control, _ = cli_context(build_parser().parse_args(["status"]))
    assert control.root == str(work / "control")
    assert (specs[0].source, specs[0].target) == (
        str(work / "lake" / "bronze" / "m"),
        str(work / "lake" / "silver" / "m"),
    )
    # A URI is left as it is.
    assert LakeLayout(lake_root="s3://bucket/lake").lake_root == "s3://bucket/lake"


def test_silver_on_a_relative_lake_root_materializes_and_a_failing_run_is_classified(
    spark: SparkSession,
    spark_resource: SparkResource,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The materialization writes silver under the absolute root (the test's JVM keeps its own
    working directory, so a relative path would not even point there); then a control root a
    file stands in the way of fails deltalake's write, and the step fails as
    `UnknownReadFailure` naming the pipeline, with the original error chained."""
    work = _relative_lake(tmp_path, monkeypatch)
    bronze, silver = work / "lake" / "bronze" / "m", work / "lake" / "silver" / "m"
    make_bronze(spark, str(bronze), [(1, "ada", 10), (2, "bob", 20)])
    monkeypatch.setenv("CDF_LAKE_ROOT", "w/lake")
    monkeypatch.setenv("CDF_PIPELINES_FILE", "w/pipelines.yaml")
    monkeypatch.delenv("CDF_CONTROL_ROOT", raising=False)
    instance = dg.DagsterInstance.ephemeral()

    defs = build_defs(LakeLayout.from_environment(), spark_resource, automation=False)
    loaded = materialization(materialize(defs, SILVER_M, instance=instance), SILVER_M)
    assert (loaded["mode"], loaded["watermark_after"], loaded["path"]) == (
        "initial_load",
        1,
        str(silver),
    )
    assert rows(spark, str(silver)) == [(1, "ada", 10), (2, "bob", 20)]
    state = ControlTable(str(work / "lake" / "_control")).read_states()["m"]
    assert state["target"] == str(silver)

    (work / "in_the_way").write_text("not a folder")
    blocked = LakeLayout(
        lake_root="w/lake", control_root="w/in_the_way/control", pipelines_file="w/pipelines.yaml"
    )
    failed = materialize(
        build_defs(blocked, spark_resource, automation=False),
        SILVER_M,
        instance=instance,
        raise_on_error=False,
    )

    assert not failed.success
    (event,) = [e for e in failed.all_events if e.is_step_failure]
    assert event.step_failure_data is not None
    failure = event.step_failure_data.error
    assert failure is not None
    assert failure.message.startswith(
        "dagster._core.definitions.events.Failure: UnknownReadFailure [pipeline=m]: the run "
        "failed: TableNotFoundError: Could not create local directory"
    ), failure.message
    assert "then rerun the materialization of silver/m" in failure.message
    user_data = event.step_failure_data.user_failure_data
    assert user_data is not None
    assert user_data.metadata["incident_code"].value == "UNKNOWN_READ_FAILURE"
    classified = failure.cause
    assert classified is not None and classified.cls_name == "UnknownReadFailure"
    assert classified.cause is not None and classified.cause.cls_name == "TableNotFoundError"
