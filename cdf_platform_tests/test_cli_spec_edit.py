"""The story of the spec-change bug, through `cdf-platform` as a new user drives it: three
pipelines on one bronze table, each loaded once; the pipelines file edited (a `where` added, a
derived column's formula changed, the keys widened); one unrelated bronze UPDATE; each pipeline
run. Every silver then equals its new spec applied to bronze, and `status` shows the edits
before the runs and OK after."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from cdf_platform_tests.bronze import rows, sql
from cdf_platform_tests.cli_session import CliSession

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


def _states(cli: CliSession, flags: list[str]) -> tuple[int, dict[str, tuple[str, str, list[str]]]]:
    code, output = cli.run("status", "--json", *flags)
    return code, {
        row["pipeline_id"]: (row["state"], row["spec_state"], row["spec_changed_fields"])
        for row in json.loads(output)
    }


def test_edited_specs_reach_silver_through_the_cli(
    spark: SparkSession, lake: Path, tmp_path: Path
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
    env = {"CDF_SPARK_MASTER": "local[2]", "CDF_SPARK_LOG": str(tmp_path / "spark.log")}
    with CliSession(env, tmp_path / "cli.log") as cli:
        for pipeline in IDS:
            code, _ = cli.run("run", pipeline, *flags)
            assert code == 0, cli.log.read_text()[-2000:]
        pipelines.write_text(AFTER)
        sql(spark, bronze, "UPDATE {t} SET amount = 11 WHERE id = 1")
        code, shown = _states(cli, flags)
        assert code == 1  # status exits non-zero while silver is not its spec
        assert shown == {
            "filtered": ("SPEC_CHANGED", "CHANGED", ["where"]),
            "derived": ("SPEC_CHANGED", "CHANGED", ["columns"]),
            "rekeyed": ("SPEC_CHANGED", "CHANGED", ["keys"]),
        }
        for pipeline in IDS:
            code, output = cli.run("run", pipeline, "--json", *flags)
            assert code == 0, cli.log.read_text()[-2000:]
            figures = json.loads(output)
            assert (figures["mode"], figures["incident_code"]) == ("rebuild", "SPEC_CHANGED")
        code, shown = _states(cli, flags)
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
