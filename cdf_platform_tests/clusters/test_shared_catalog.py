"""Catalog table names in a Hive metastore service that separate Spark processes share.

The metastore is a real service on loopback (`servers.HiveMetastore`); every process reaches
it through `$SPARK_CONF_DIR/spark-defaults.conf` (`spark.sql.catalogImplementation=hive`,
`spark.hadoop.hive.metastore.uris`), as the README documents. One long-lived `cdf-platform`
process creates the bronze table by name and runs the first load, which creates and registers
silver; a Dagster run in a process of its own (`dagster job execute` on the project's
definitions, configured by the environment), with its own JVM and session catalog, runs the
increment by the same names. Select alone with `pytest -m cluster`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from cdf_platform.core.config import (
    AUTOMATION_ENV,
    LAKE_ROOT_ENV,
    MASTER_ENV,
    PIPELINES_FILE_ENV,
    SPARK_LOG_ENV,
)
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.cli_session import CliSession
from cdf_platform_tests.clusters.servers import HiveMetastore

pytestmark = pytest.mark.cluster

BRONZE, SILVER = "bronze.orders", "silver.orders"
DAGSTER = str(Path(sys.executable).parent / "dagster")


@pytest.fixture(scope="module")
def metastore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HiveMetastore]:
    """A Hive metastore service (Derby database, warehouse in a temp folder) for this module."""
    with HiveMetastore(tmp_path_factory.mktemp("metastore")) as server:
        yield server.start()


def test_a_second_process_runs_by_the_names_the_first_created_in_the_metastore(
    metastore: HiveMetastore, tmp_path: Path
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(metastore.spark_defaults(), encoding="utf-8")
    pipelines = tmp_path / "pipelines.yaml"
    document = {"pipelines": [{"id": "orders", "source": BRONZE, "target": SILVER, "keys": ["id"]}]}
    pipelines.write_text(yaml.safe_dump(document), encoding="utf-8")
    lake = tmp_path / "lake"
    env = {
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        LAKE_ROOT_ENV: str(lake),
        MASTER_ENV: "local[2]",
    }
    run = ("run", "orders", "--json", "--pipelines", str(pipelines))
    control = ControlTable(str(lake / "_control"))

    first_log = tmp_path / "first.log"
    with CliSession({**env, SPARK_LOG_ENV: str(first_log)}, first_log, cwd=tmp_path) as first:
        first.sql("CREATE SCHEMA bronze")
        first.sql("CREATE SCHEMA silver")
        first.sql(
            f"CREATE TABLE {BRONZE} (id BIGINT, name STRING, amount INT) USING DELTA "
            "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
        )
        first.sql(f"INSERT INTO {BRONZE} VALUES (1, 'ada', 10), (2, 'bob', 20), (3, 'cy', 30)")
        code, output = first.run(*run)
        assert code == 0, output
        assert json.loads(output.splitlines()[-1])["mode"] == "initial_load"
        located = control.read_locations()
        assert located[BRONZE]["location"] == f"{metastore.warehouse}/bronze.db/orders"
        assert located[SILVER]["location"] == f"{metastore.warehouse}/silver.db/orders"
        first.sql(f"UPDATE {BRONZE} SET amount = 11 WHERE id = 1")  # 2
        first.sql(f"DELETE FROM {BRONZE} WHERE id = 2")  # 3
        first.sql(f"INSERT INTO {BRONZE} VALUES (4, 'dee', 40)")  # 4

        # A Dagster run with its own JVM and session catalog: with an in-memory catalog it
        # would know neither name (bronze: SourceNotFound; silver's schema:
        # InvalidPipelineSpec).
        dagster_home = tmp_path / "dagster_home"
        dagster_home.mkdir()
        second = subprocess.run(
            [DAGSTER, "job", "execute", "-m", "cdf_platform.definitions", "-j", "incremental_job"],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
            cwd=tmp_path,
            env={
                **os.environ,
                **env,
                "DAGSTER_HOME": str(dagster_home),
                PIPELINES_FILE_ENV: str(pipelines),
                AUTOMATION_ENV: "off",
            },
        )
        assert second.returncode == 0, second.stderr[-4000:]
        *_, increment = control.read_log("orders")
        assert (increment["mode"], increment["start_version"], increment["end_version"]) == (
            "incremental",
            2,
            4,
        )
        # Bronze and silver found where the first process recorded them, silver with the table
        # id its first run, which created it, recorded: nothing recorded again.
        after = control.read_locations()
        assert after == located
        assert after[SILVER]["table_id"] == DeltaTable(after[SILVER]["location"]).metadata().id
        silver_rows = first.sql(f"SELECT id, name, amount FROM {SILVER} ORDER BY id")
    assert silver_rows == [[1, "ada", 11], [3, "cy", 30], [4, "dee", 40]]
