"""The story of the spec-change bug, through `cdf-platform` as a new user drives it: three
pipelines on one bronze table, each loaded once; the pipelines file edited (a `where` added, a
derived column's formula changed, the keys widened); one unrelated bronze UPDATE; each pipeline
run. Every silver then equals its new spec applied to bronze, and `status` shows the edits
before the runs and OK after.

The commands run in this process, through the CLI's entry point (`cdf_platform.cli.main`), on
the tests' SparkSession; `test_cli.py` and `test_cli_relative_roots.py` run `cdf-platform` in a
process of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdf_platform.cli import main
from cdf_platform.core.config import MASTER_ENV
from cdf_platform_tests.bronze import rows, sql

BEFORE = """pipelines:
  - {id: filtered, source: bronze, target: filtered, keys: [id]}
  - {id: derived, source: bronze, target: derived, keys: [id], columns: {amount_x: "amount * 2"}}
  - {id: rekeyed, source: bronze, target: rekeyed, keys: [id]}
"""
AFTER = """pipelines:
  - {id: filtered, source: bronze, target: filtered, keys: [id], where: "status != 'TEST'"}
  - {id: derived, source: bronze, target: derived, keys: [id], columns: {amount_x: "amount * 3"}}
  - {id: rekeyed, source: bronze, target: rekeyed, keys: [id, region]}
"""
IDS = ("filtered", "derived", "rekeyed")


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`cdf-platform <args>`: its exit code, stdout and stderr."""
    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _states(
    capsys: pytest.CaptureFixture[str], flags: list[str]
) -> tuple[int, dict[str, tuple[str, str, list[str]]]]:
    code, output, _ = cli(capsys, "status", "--json", *flags)
    return code, {
        row["pipeline_id"]: (row["state"], row["spec_state"], row["spec_changed_fields"])
        for row in json.loads(output)
    }


@pytest.mark.usefixtures("shuffle_partitions_kept")
def test_edited_specs_reach_silver_through_the_cli(
    spark: SparkSession,
    lake: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bronze = str(lake / "bronze")
    sql(
        spark,
        bronze,
        "CREATE TABLE {t} (id BIGINT, region STRING, status STRING, amount INT) USING DELTA "
        "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')",
    )
    sql(
        spark,
        bronze,
        "INSERT INTO {t} VALUES (1, 'eu', 'OK', 10), (2, 'us', 'OK', 20), (3, 'eu', 'TEST', 30), "
        "(4, 'us', 'OK', 40)",
    )
    pipelines = tmp_path / "pipelines.yaml"
    pipelines.write_text(BEFORE)
    flags = ["--pipelines", str(pipelines), "--lake-root", str(lake)]
    # The tests' session's master: the runs size their Spark settings to its cores.
    monkeypatch.setenv(MASTER_ENV, "local[2]")
    for pipeline in IDS:
        code, _, err = cli(capsys, "run", pipeline, *flags)
        assert code == 0, err[-2000:]
    pipelines.write_text(AFTER)
    sql(spark, bronze, "UPDATE {t} SET amount = 11 WHERE id = 1")
    code, shown = _states(capsys, flags)
    assert code == 1  # status exits non-zero while silver is not its spec
    assert shown == {
        "filtered": ("SPEC_CHANGED", "CHANGED", ["where"]),
        "derived": ("SPEC_CHANGED", "CHANGED", ["columns"]),
        "rekeyed": ("SPEC_CHANGED", "CHANGED", ["keys"]),
    }
    for pipeline in IDS:
        code, output, err = cli(capsys, "run", pipeline, "--json", *flags)
        assert code == 0, err[-2000:]
        figures = json.loads(output)
        assert (figures["mode"], figures["incident_code"]) == ("rebuild", "SPEC_CHANGED")
    code, shown = _states(capsys, flags)
    assert code == 0
    assert shown == {pipeline: ("OK", "OK", []) for pipeline in IDS}

    assert rows(spark, str(lake / "filtered"), "id") == [(1,), (2,), (4,)]
    assert rows(spark, str(lake / "derived"), "id", "amount_x") == [
        (1, 33),
        (2, 60),
        (3, 90),
        (4, 120),
    ]
    assert rows(spark, str(lake / "rekeyed"), "id", "region", "amount") == [
        (1, "eu", 11),
        (2, "us", 20),
        (3, "eu", 30),
        (4, "us", 40),
    ]
