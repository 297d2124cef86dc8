"""`cdf-platform` with relative roots (flags and environment variables) behaves exactly like its
absolute form, and a run failing outside the platform's classifier still exits 2 with a
classified error, never a raw traceback."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import insert, make_bronze, rows, sql
from cdf_platform_tests.cli_process import run_cli
from cdf_platform_tests.cli_session import CliSession

PIPELINES = "pipelines:\n  - id: m\n    source: bronze/m\n    target: silver/m\n    keys: [id]\n"


def _spark_env(tmp_path: Path) -> dict[str, str]:
    return {"CDF_SPARK_MASTER": "local[2]", "CDF_SPARK_LOG": str(tmp_path / "spark.log")}


def test_run_rebuild_and_status_on_relative_roots_from_flags_and_environment(
    spark: SparkSession, tmp_path: Path
) -> None:
    """`--lake-root w/lake --control-root w/control` (and the same in $CDF_LAKE_ROOT /
    $CDF_CONTROL_ROOT) load, rebuild and report the tables under the working directory."""
    work = tmp_path / "w"
    bronze, silver = work / "lake" / "bronze" / "m", work / "lake" / "silver" / "m"
    make_bronze(spark, str(bronze), [(1, "ada", 10), (2, "bob", 20)])
    sql(spark, str(bronze), "UPDATE {t} SET amount = 11 WHERE id = 1")
    (work / "pipelines.yaml").write_text(PIPELINES)
    flags = ["--pipelines", "w/pipelines.yaml", "--lake-root", "w/lake", "--control-root"]
    flags.append("w/control")
    variables = {
        "CDF_PIPELINES_FILE": "w/pipelines.yaml",
        "CDF_LAKE_ROOT": "w/lake",
        "CDF_CONTROL_ROOT": "w/control",
    }

    # The commands run in one CLI process (`CliSession`), so Spark starts once for both runs;
    # each command gets the roots from its own flags or variables only.
    with CliSession(_spark_env(tmp_path), tmp_path / "cli.log", cwd=tmp_path) as cli:
        # The first run creates silver with Spark: a relative path in `delta.`...`` SQL used
        # to fail with SCHEMA_NOT_FOUND.
        code, output = cli.run("run", "m", "--json", *flags)
        assert code == 0, cli.log.read_text()[-2000:]
        figures = json.loads(output)
        assert (figures["mode"], figures["watermark_after"]) == ("initial_load", 2)

        insert(spark, str(bronze), [(3, "cy", 30)])
        code, output = cli.run("rebuild", "m", "--json", env=variables)
        assert code == 0, cli.log.read_text()[-2000:]
        figures = json.loads(output)
        assert (figures["mode"], figures["watermark_after"], figures["incident_code"]) == (
            "rebuild",
            3,
            "MANUAL_REBUILD",
        )
        assert rows(spark, str(silver)) == [(1, "ada", 11), (2, "bob", 20), (3, "cy", 30)]
        # Both commands wrote the same control tables, which record the absolute locations.
        state = ControlTable(str(work / "control")).read_states()["m"]
        assert (state["source"], state["target"]) == (str(bronze), str(silver))
        assert state["last_commit_version"] == 3

        for code, output in (
            cli.run("status", "--json", *flags),
            cli.run("status", "--json", env=variables),
        ):
            assert code == 0, cli.log.read_text()[-2000:]
            (row,) = json.loads(output)
            assert (row["pipeline_id"], row["state"], row["watermark"]) == ("m", "OK", 3)


def test_a_run_failing_outside_the_classifier_exits_2_with_a_classified_error(
    spark: SparkSession, lake: Path, tmp_path: Path
) -> None:
    """A control root that cannot be written (a file stands in the way) fails deltalake's write
    with a raw TableNotFoundError: the command still says which pipeline failed, the error's
    first line and what to do."""
    bronze = lake / "bronze" / "m"
    make_bronze(spark, str(bronze), [(1, "ada", 10)])
    spec = PipelineSpec(id="m", source=str(bronze), target=str(lake / "silver" / "m"), keys=["id"])
    PipelineRunner.on(ControlTable(str(lake / "_control")), lambda: spark).run(spec)
    (tmp_path / "pipelines.yaml").write_text(PIPELINES)
    (tmp_path / "in_the_way").write_text("not a folder")

    # Silver is caught up: a no-op that repairs the missing state row of this control root,
    # without starting Spark.
    failed = run_cli(
        "run",
        "m",
        "--pipelines",
        "pipelines.yaml",
        "--lake-root",
        "lake",
        "--control-root",
        "in_the_way/control",
        cwd=tmp_path,
    )

    assert failed.returncode == 2, failed.stderr[-2000:]
    assert "Traceback" not in failed.stderr
    message = failed.stderr.strip().splitlines()[-1]
    assert message.startswith(
        "UnknownReadFailure [pipeline=m]: the run failed: TableNotFoundError: Could not create "
        f"local directory: {tmp_path / 'in_the_way' / 'control'}"
    ), message
    assert "What to do: fix the cause the error names, then rerun `cdf-platform run m`" in message
