"""Expectations through Dagster and the CLI: a silver materialization judges its rows, and each
rule's asset check reports its failing rows and fraction (WARN past `warn_above`, ERROR past
`error_above`, ERROR when a `fail` rule refused the run), the quarantine's size beside a
`quarantine` rule; `cdf-platform run --json` gives the same counts."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.cli import main
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_tests.bronze import make_bronze, rows, sql
from cdf_platform_tests.lake_platform import lake_defs, materialize

PEOPLE = {
    "id": "people",
    "source": "bronze/people",
    "target": "silver/people",
    "keys": ["id"],
    "expectations": [
        {"name": "positive", "rule": "amount > 0", "action": "quarantine"},
        {"name": "small", "rule": "amount < 1000", "action": "warn", "warn_above": 0.5},
        {"name": "named", "rule": "name IS NOT NULL", "action": "drop", "error_above": 0.2},
        {"name": "known", "rule": "id < 100", "action": "fail"},
    ],
}
KEY = silver_key("people")


def _evaluations(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations() if e.asset_key == KEY}


def test_each_rule_has_a_check_and_the_cli_gives_the_counts(
    spark: SparkSession,
    spark_resource: SparkResource,
    lake: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    defs = lake_defs(spark_resource, lake, PEOPLE)
    instance = dg.DagsterInstance.ephemeral()
    bronze = str(lake / "bronze" / "people")
    make_bronze(
        spark, bronze, [(1, "a", 10), (2, "b", -5), (3, None, 30), (4, "d", 2000), (5, "e", 5)]
    )
    result = materialize(defs, KEY, instance=instance)
    assert result.success
    checks = _evaluations(result)
    assert set(checks) >= {f"expectation_{n}" for n in ("positive", "small", "named", "known")}
    positive = checks["expectation_positive"]
    assert (positive.passed, positive.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert positive.metadata["failing_rows"].value == 1
    assert positive.metadata["judged_rows"].value == 5
    assert positive.metadata["quarantined_rows"].value == 1
    assert positive.metadata["failing_fraction"].value == 0.2
    # 1 of 5 is under `small`'s warn_above (0.5): it passes.
    assert checks["expectation_small"].passed
    # 1 of 5 (0.2) is not above `named`'s error_above (0.2): a WARN.
    named = checks["expectation_named"]
    assert (named.passed, named.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert checks["expectation_known"].passed
    assert rows(spark, str(lake / "silver" / "people"), "id") == [(1,), (4,), (5,)]
    # The materialization's metadata carries the counts too.
    (materialization,) = result.asset_materializations_for_node(KEY.to_python_identifier())
    assert materialization.metadata["expectation_positive_failing"].value == 1

    # Two of the next three rows are unnamed: `named` is past its error_above.
    sql(spark, bronze, "INSERT INTO {t} VALUES (6, NULL, 1), (7, NULL, 2), (8, 'h', 3)")
    capsys.readouterr()
    command = ["run", "people", "--json", "--pipelines", str(lake / "pipelines.yaml")]
    assert main([*command, "--lake-root", str(lake)]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert (ran["expectations_judged"], ran["expectation_named_failing"]) == (3, 2)
    checks = _evaluations(defs.resolve_job_def("checks_job").execute_in_process(instance=instance))
    named = checks["expectation_named"]
    assert (named.passed, named.severity) == (False, dg.AssetCheckSeverity.ERROR)

    # A `fail` rule refuses the run; its check is an ERROR naming the refusal.
    sql(spark, bronze, "INSERT INTO {t} VALUES (100, 'x', 1)")
    refused = materialize(defs, KEY, instance=instance, raise_on_error=False)
    assert not refused.success
    checks = _evaluations(defs.resolve_job_def("checks_job").execute_in_process(instance=instance))
    known = checks["expectation_known"]
    assert (known.passed, known.severity) == (False, dg.AssetCheckSeverity.ERROR)
    assert "refused" in str(known.description)
    assert rows(spark, str(lake / "silver" / "people"), "id") == [(1,), (4,), (5,), (8,)]


def test_the_overview_gives_the_quarantines_size(
    spark: SparkSession, spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, PEOPLE)
    instance = dg.DagsterInstance.ephemeral()
    make_bronze(spark, str(lake / "bronze" / "people"), [(1, "a", 10), (2, "b", -5), (3, "c", 0)])
    assert materialize(defs, KEY, instance=instance).success
    checks = defs.resolve_job_def("checks_job").execute_in_process(instance=instance)
    (overview,) = checks.asset_materializations_for_node("platform__pipelines")
    assert overview.metadata["quarantined_rows"].value == 2
    assert "Quarantined rows: people 2." in str(overview.metadata["pipelines"].value)
