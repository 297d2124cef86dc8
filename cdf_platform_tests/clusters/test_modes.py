"""The core story in every way of running Spark, on either kind of lake, with tables named by
path or by name in a shared catalog: one matrix (`CELLS`).

- Modes: local (`CDF_SPARK_MASTER=local[2]`: the three-process test's first process), on a
  standalone cluster (`CDF_SPARK_MASTER=spark://...`), over Spark Connect
  (`CDF_SPARK_REMOTE=sc://...`).
- Lakes: a local folder every process shares, or a bucket of the tests' S3 server.
- Tables: paths under the lake, or names in a Hive metastore service every process shares
  (`servers.HiveMetastore`, its schemas on S3), reached as docs/clusters.md documents: the command
  line's `$SPARK_CONF_DIR/spark-defaults.conf`, the Connect server's own conf.

Runs are the `cdf-platform` CLI in a subprocess, configured only by the environment, as a user
runs it (a story's runs are commands of one CLI process, so on the
cluster its application starts once: `cli_session.py`); bronze is written by the test's own
session (paths) or by that process's session, through its catalog (names). Every cell ends with
`status --json` in a process that cannot find Java. The shared-run story of several pipelines
runs as Dagster runs it instead, on the cluster and over Connect: a tick of the incremental
sensor and the run it requests in a process of its own (`daemon_tick.py`). Select alone with
`pytest -m cluster`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import dagster as dg
import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.config import (
    AUTOMATION_ENV,
    JVM_FREE_MERGE_MAX_ROWS_ENV,
    LAKE_ROOT_ENV,
    MASTER_ENV,
    PIPELINES_FILE_ENV,
    REMOTE_ENV,
    SPARK_LOG_ENV,
)
from cdf_platform.core.faults import FAULT_ENV, FAULT_EXIT_CODE, FaultPoint
from cdf_platform.core.spec.spec_file import find_spec, load_specs
from cdf_platform.core.sql import sql_path
from cdf_platform.definitions import build_defs
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.orchestration.shared.keys import REQUESTED_TAG, silver_key
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform.services.service import free_port
from cdf_platform.spark.runtime.object_stores import object_store_conf
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_testkit.spark_servers import (
    ConnectServer,
    HiveMetastore,
    StandaloneCluster,
    s3a_jars,
)
from cdf_platform_tests.bronze import (
    assert_converged_after_kill,
    make_bronze,
    null_key_commit,
    rows,
    sql,
    vacuum_retain_zero,
)
from cdf_platform_tests.cli_process import run_cli
from cdf_platform_tests.cli_session import CliSession
from cdf_platform_tests.daemon_tick import dagster_home, tick_in_a_process
from cdf_platform_tests.lake_platform import (
    control_for,
    incremental_tick,
    run_as_daemon,
    table_rows,
)

pytestmark = [pytest.mark.cluster, pytest.mark.heavy, pytest.mark.long(minutes=8)]

PEOPLE = {"id": "people", "keys": ["id"]}
CREATE_BRONZE = (
    "CREATE TABLE {t} (id BIGINT, name STRING, amount INT) USING DELTA "
    "TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
)
DAGSTER = str(Path(sys.executable).parent / "dagster")


@dataclass(frozen=True)
class Cell:
    """One cell of the matrix: where Spark runs, where the lake is, how tables are named."""

    mode: str  # standalone | connect (local: the three-process test)
    lake: str  # folder | s3
    tables: str  # paths | names

    def __str__(self) -> str:
        return f"{self.mode}-{self.lake}-{self.tables}"


# The cluster and Connect on S3 by name. Local mode on S3 by name is the first process of the
# three-process test below: it runs this story's every step but the increment, which a Dagster
# run process, in local mode too, runs there. So every mode is on S3 and every mode uses names
# in the shared metastore. The folder cells run elsewhere: the cluster on a folder every node
# mounts, by path, in the shared-run story below (its runs' steps on the cluster); local mode
# by path in runner/test_rebuild.py (the same story in this process's session); Connect by
# path in the kill and transform tests below and on the engine (clusters/test_engine.py); a
# folder by name in runner/test_catalog_names.py (the in-memory catalog); S3 by path in local
# mode in s3/test_lake_on_s3.py.
CELLS = [Cell(mode, "s3", "names") for mode in ("standalone", "connect")]


def status_without_java(pipelines: Path, env: dict[str, str]) -> dict[str, Any]:
    """`status --json` of the one pipeline of `pipelines` in a process configured by `env`
    that cannot find Java."""
    no_java = {
        "JAVA_HOME": str(pipelines.parent / "no-java"),
        "PATH": str(Path(sys.executable).parent),
    }
    done = run_cli("status", "--json", "--pipelines", str(pipelines), env={**env, **no_java})
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    (figures,) = json.loads(done.stdout)
    assert isinstance(figures, dict)
    return figures


def _s3a(uri: str) -> str:
    """`uri` with the `s3a://` scheme (the one Hadoop's S3A, in the metastore too, serves)."""
    return "s3a://" + uri.split("://", 1)[1]


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master and one worker (2 cores, 2 GiB) for this module. The worker, and so
    its executors, have the S3 server's credentials in their environment, as a cluster's nodes
    have their own."""
    with StandaloneCluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster.start()


@pytest.fixture(scope="module")
def metastore(
    tmp_path_factory: pytest.TempPathFactory, spark: SparkSession, s3_server: LocalS3Server
) -> Iterator[HiveMetastore]:
    """A Hive metastore service for this module (Derby database in a temp folder) that can
    create its schemas' folders on the S3 server: S3A's jars (those the test session resolved)
    and settings (those Spark gets from the same environment)."""
    s3a = object_store_conf({"s3a"}, os.environ).conf
    hadoop = {key.removeprefix("spark.hadoop."): value for key, value in s3a.items()}
    workdir = tmp_path_factory.mktemp("metastore")
    with HiveMetastore(workdir, jars=s3a_jars(spark), hadoop_conf=hadoop) as server:
        yield server.start()


@pytest.fixture(scope="module")
def connect_server(
    tmp_path_factory: pytest.TempPathFactory, metastore: HiveMetastore
) -> Iterator[ConnectServer]:
    """A Spark Connect server with Delta, S3A for the S3 server and the metastore as its
    catalog, for this module."""
    stores = object_store_conf({"s3", "s3a"}, os.environ)
    workdir = tmp_path_factory.mktemp("connect")
    with ConnectServer(workdir, stores=stores, conf=metastore.spark_conf()) as server:
        yield server.start()


def spark_env(request: pytest.FixtureRequest, mode: str) -> dict[str, str]:
    """The environment that makes a process's Spark a driver on this module's standalone
    cluster (`standalone`) or a client of its Connect server (`connect`), started on first
    use."""
    if mode == "standalone":
        cluster: StandaloneCluster = request.getfixturevalue("standalone")
        return cluster.driver_env()
    server: ConnectServer = request.getfixturevalue("connect_server")
    return server.client_env()


class Platform:
    """`cdf-platform` on one lake (an S3 URI, or by default `workdir/lake`), with Spark in one
    of the three modes, on bronze and silver named by path under the lake or, with `names`, in
    schemas `bronze_<names>` and `silver_<names>` of the session's catalog."""

    def __init__(
        self,
        spark: SparkSession,
        workdir: Path,
        env: dict[str, str],
        lake: str | None = None,
        names: str | None = None,
        **fields: Any,
    ):
        lake = lake or str(workdir / "lake")
        self.spark, self.workdir, self.lake, self.env = spark, workdir, lake, env
        self.names = names
        self.session: CliSession | None = None
        self.cluster: StandaloneCluster | None = None
        self.apps_before: set[str] = set()
        tables = (
            {"source": f"bronze_{names}.people", "target": f"silver_{names}.people"}
            if names
            else {"source": "bronze/people", "target": "silver/people"}
        )
        self.pipelines = workdir / "pipelines.yaml"
        self.pipelines.write_text(
            yaml.safe_dump({"pipelines": [{**PEOPLE, **tables, **fields}]}), encoding="utf-8"
        )
        self.spec = find_spec(load_specs(self.pipelines, lake_root=lake), "people")
        self.control = ControlTable(f"{lake}/_control")

    def cli(self, *args: str, env: dict[str, str] | None = None) -> CompletedProcess[str]:
        """`cdf-platform <args> --json` in a subprocess configured by the environment."""
        return run_cli(
            *args,
            "--json",
            "--pipelines",
            str(self.pipelines),
            env={LAKE_ROOT_ENV: self.lake, **self.env, **(env or {})},
        )

    def run(self) -> dict[str, Any]:
        """One run of the pipeline: its result figures."""
        if self.session is not None:
            code, output = self.session.run(
                "run", "people", "--json", "--pipelines", str(self.pipelines)
            )
            assert code == 0, output
        else:
            done = self.cli("run", "people")
            assert done.returncode == 0, done.stderr[-4000:]
            output = done.stdout
        figures: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
        return figures

    def sql(self, statement: str, table: str | None = None) -> list[list[Any]]:
        """`statement` with `{t}` standing for `table` (default: bronze), on the test's session
        for paths, on the CLI process's session (through its catalog) for names."""
        table = table or self.spec.source
        if self.names:
            assert self.session is not None
            return self.session.sql(statement.format(t=table))
        return [list(row) for row in self.spark.sql(statement.format(t=sql_path(table))).collect()]

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        """The sorted (id, name, amount) rows of `table`."""
        return sorted(tuple(row) for row in self.sql("SELECT id, name, amount FROM {t}", table))

    def vacuum_retain_zero(self) -> None:
        """VACUUM bronze of every file its current version does not need, past Delta's check."""
        if not self.names:
            vacuum_retain_zero(self.spark, self.spec.source)
            return
        check = "spark.databricks.delta.retentionDurationCheck.enabled"
        self.sql(f"SET {check} = false")
        self.sql("VACUUM {t} RETAIN 0 HOURS")
        self.sql(f"SET {check} = true")

    def location(self, table: str) -> str:
        """Where `table` is: its path, or the location runs recorded for its name."""
        if not self.names:
            return table
        return str(self.control.read_locations()[table]["location"])

    def create_schemas(self) -> None:
        """The two schemas of the named tables, under the lake."""
        for table in (self.spec.source, self.spec.target):
            schema = table.split(".")[0]
            self.sql(f"CREATE SCHEMA {schema} LOCATION '{_s3a(self.lake)}/{schema}'")

    def status_without_java(self) -> dict[str, Any]:
        """`status --json` of the pipeline in a process that cannot find Java."""
        return status_without_java(self.pipelines, {LAKE_ROOT_ENV: self.lake, **self.env})

    def assert_ran_on_the_cluster(self) -> None:
        """The runs since `on_cluster` were one application of the master's, with its
        executor on the worker (`StandaloneCluster.assert_one_application_since`)."""
        assert self.cluster is not None
        self.cluster.assert_one_application_since(self.apps_before)

    def on_cluster(self, cluster: StandaloneCluster) -> None:
        """Note the cluster's applications so far: `assert_ran_on_the_cluster` counts new ones."""
        self.cluster, self.apps_before = cluster, set(cluster.applications())

    def with_session(self, log: Path) -> CliSession:
        """Run the following `run()`s as commands of one long-lived CLI process."""
        env = {LAKE_ROOT_ENV: self.lake, SPARK_LOG_ENV: str(log), **self.env}
        self.session = CliSession(env, log)
        return self.session


@pytest.fixture(params=CELLS, ids=str)
def platform(
    request: pytest.FixtureRequest, spark: SparkSession, tmp_path: Path, s3_server: LocalS3Server
) -> Iterator[Platform]:
    """The platform in one cell of the matrix (servers started on first use)."""
    cell: Cell = request.param
    env = spark_env(request, cell.mode)
    defaults = ""  # the CLI process's spark-defaults.conf
    if cell.mode == "standalone":
        cluster: StandaloneCluster = request.getfixturevalue("standalone")
        defaults += cluster.spark_defaults()
    if cell.tables == "names" and cell.mode != "connect":
        defaults += request.getfixturevalue("metastore").spark_defaults()
    if defaults:
        (tmp_path / "conf").mkdir()
        (tmp_path / "conf" / "spark-defaults.conf").write_text(defaults, encoding="utf-8")
        env["SPARK_CONF_DIR"] = str(tmp_path / "conf")
    lake = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}" if cell.lake == "s3" else None
    names = cell.mode if cell.tables == "names" else None
    platform = Platform(spark, tmp_path, env, lake, names=names, delete_mode="hard")
    if cell.mode == "standalone":
        platform.on_cluster(cluster)
    # One CLI process for the story's runs: on the cluster, one application (driver and
    # executor started once); over Connect, one client (the other Connect tests start a fresh
    # `cdf-platform` process per run).
    with platform.with_session(tmp_path / "cli.log"):
        if names:
            platform.create_schemas()
        yield platform


def test_load_increment_lose_the_window_and_rebuild(platform: Platform) -> None:
    spec = platform.spec
    platform.sql(CREATE_BRONZE)  # 0
    platform.sql("INSERT INTO {t} VALUES (1, 'ada', 10), (2, 'bob', 20), (3, 'cy', 30)")  # 1
    first = platform.run()
    assert (first["mode"], first["end_version"]) == ("initial_load", 1)

    platform.sql("UPDATE {t} SET amount = 11 WHERE id = 1")  # 2
    platform.sql("DELETE FROM {t} WHERE id = 2")  # 3
    platform.sql("INSERT INTO {t} VALUES (4, 'dee', 40)")  # 4
    second = platform.run()
    assert (second["mode"], second["start_version"], second["end_version"]) == (
        "incremental",
        2,
        4,
    )
    assert second["rows_deleted"] == 1
    assert platform.rows(spec.target) == platform.rows(spec.source)

    platform.sql("UPDATE {t} SET amount = 31 WHERE id = 3")  # 5
    platform.sql("DELETE FROM {t} WHERE id = 4")  # 6
    platform.vacuum_retain_zero()
    status = platform.status_without_java()  # from the logs, no Spark
    assert (status["state"], status["watermark"]) == ("LOST", 4), status
    assert status["problem_code"] == "WATERMARK_OUTSIDE_RETENTION"

    latest = DeltaLog(platform.location(spec.source)).latest_version()  # 6, or 8 with VACUUM's
    rebuilt = platform.run()
    assert (rebuilt["mode"], rebuilt["end_version"]) == ("rebuild", latest)
    assert rebuilt["incident_code"] == "WATERMARK_OUTSIDE_RETENTION"
    expected = [(1, "ada", 11), (3, "cy", 31)]
    assert platform.rows(spec.target) == platform.rows(spec.source) == expected
    assert read_silver_state(platform.location(spec.target), spec.id).watermark == latest
    assert platform.control.read_states()["people"]["last_commit_version"] == latest
    status = platform.status_without_java()
    assert (status["state"], status["watermark"]) == ("OK", latest), status
    if platform.cluster is not None:
        platform.assert_ran_on_the_cluster()


@pytest.mark.parametrize("mode", ["standalone", "connect"])
def test_small_change_sets_share_one_run_in_the_mode_and_a_failing_pipeline_fails_alone(
    mode: str,
    request: pytest.FixtureRequest,
    spark: SparkSession,
    spark_resource: SparkResource,
    tmp_path: Path,
) -> None:
    """The story of orchestration/test_shared_runs.py with a NULL key, its shared run in the
    mode: the tick and its runs in a process of its own (`daemon_tick`) with the platform's
    Definitions as `dagster` loads them from the environment. The initial loads run here, on
    the same instance and the test's local session (the matrix story loads in each mode)."""
    ids = ["a", "b", "c"]
    lake = tmp_path / "lake"
    lake.mkdir()
    layout = control_for(lake, *(orders_pipeline(i) for i in ids))
    defs = build_defs(layout, spark_resource)
    env = {
        LAKE_ROOT_ENV: str(lake),
        PIPELINES_FILE_ENV: str(lake / "pipelines.yaml"),
        **spark_env(request, mode),
        # The mode's Spark runs the steps (small SCD1 change sets would need none).
        JVM_FREE_MERGE_MAX_ROWS_ENV: "0",
    }
    cluster: StandaloneCluster | None = (
        request.getfixturevalue("standalone") if mode == "standalone" else None
    )
    home = dagster_home(tmp_path / "dagster_home")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for pipeline_id in ids:
            write_orders_batch(str(lake / "bronze" / pipeline_id), batch_size=20)
        for initial in incremental_tick(defs, instance).run_requests:
            assert run_as_daemon(defs, instance, initial).success
        loaded_c = DeltaTable(str(lake / "silver" / "c")).version()

        # Small change sets, c's with a NULL key: one run for the three, in one driver.
        write_orders_batch(str(lake / "bronze" / "a"), batch_size=10)
        write_orders_batch(str(lake / "bronze" / "b"), batch_size=10)
        null_key_commit(str(lake / "bronze" / "c"))
        apps_before = set(cluster.applications()) if cluster else set()
        tick = tick_in_a_process(home, env, tmp_path / "tick.json")
        assert [run.pipelines for run in tick.runs] == [ids], tick
        (shared,) = tick.runs
        assert shared.run_key is not None and shared.run_key.startswith("batch:"), shared
        assert shared.tags[REQUESTED_TAG] == "a=incremental:2,b=incremental:2,c=incremental:2"
        assert not shared.success
        (failure,) = shared.step_failures
        assert failure.step_key == silver_key("c").to_python_identifier()
        assert "DataQualityError" in failure.errors, failure
        for pipeline_id in ("a", "b"):
            silver, bronze = lake / "silver" / pipeline_id, lake / "bronze" / pipeline_id
            assert table_rows(spark, str(silver)) == table_rows(spark, str(bronze))
        assert DeltaTable(str(lake / "silver" / "c")).version() == loaded_c  # untouched
        if cluster is not None:
            # The run process's own driver: one application of the master's did the steps.
            assert len(tick.jvms) == 1, tick.jvms
            cluster.assert_one_application_since(apps_before)
        else:
            # A Connect client: a run that fell back to local Spark would have started a JVM.
            assert tick.jvms == []

        # c failed in its own code at version 2: not asked again until bronze moves (the
        # sensor reads the run the process recorded).
        quiet = incremental_tick(defs, instance)
        assert not quiet.run_requests
        assert f"c (run {shared.run_id[:8]} failed at 2)" in str(quiet.skip_reason)
        write_orders_batch(str(lake / "bronze" / "a"), batch_size=10)
        (only_a,) = incremental_tick(defs, instance).run_requests
    assert only_a.asset_selection == [silver_key("a")]
    assert only_a.run_key == "incremental:a:3"


def test_a_run_killed_after_the_merge_over_spark_connect_reruns_exactly(
    spark: SparkSession, tmp_path: Path, connect_server: ConnectServer
) -> None:
    platform = Platform(
        spark,
        tmp_path,
        {REMOTE_ENV: connect_server.url},
        delete_mode="soft",
        fallback_mode="FAIL_FAST",
    )
    spec, control = platform.spec, platform.control
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20)])  # 0, 1
    assert platform.run()["mode"] == "initial_load"
    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 2
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")  # 3

    # The MERGE commits on the server with the txn confs set over Connect; the client dies
    # before it writes the control table.
    killed = platform.cli("run", "people", env={FAULT_ENV: FaultPoint.BEFORE_CONTROL.value})
    assert killed.returncode == FAULT_EXIT_CODE, killed.stderr[-4000:]
    assert read_silver_state(spec.target, spec.id).watermark == 3  # atomic with the MERGE
    assert control.read_states()["people"]["last_commit_version"] == 1

    rerun = platform.run()
    assert rerun["mode"] == "noop"
    assert_converged_after_kill(spark, spec, control)


def test_conforming_transforms_over_spark_connect_are_applied_and_checked(
    spark: SparkSession, tmp_path: Path, connect_server: ConnectServer
) -> None:
    """The client has no JVM: the transforms are checked on the analysed plan the server
    prints, then applied on the server like in a local session."""
    remote = {REMOTE_ENV: connect_server.url}
    for name in ("conformed", "refused"):
        (tmp_path / name).mkdir()
    conformed = Platform(
        spark,
        tmp_path / "conformed",
        remote,
        columns={"amount_x2": "amount * 2"},
        where="amount >= 15",
    )
    make_bronze(spark, conformed.spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    assert conformed.run()["mode"] == "initial_load"
    assert rows(spark, conformed.spec.target) == [(2, "bob", 20, 40), (3, "cy", 30, 60)]

    refused = Platform(
        spark,
        tmp_path / "refused",
        remote,
        columns={"r": "rand()"},
    )
    make_bronze(spark, refused.spec.source, [(1, "ada", 10)])
    done = refused.cli("run", "people")
    assert done.returncode != 0
    assert "InvalidPipelineSpec" in done.stderr and "uses rand" in done.stderr, done.stderr[-2000:]
    assert not Path(refused.spec.target).exists()


def test_an_unreachable_spark_connect_server_is_a_classified_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = f"sc://127.0.0.1:{free_port()}"  # nothing listens there
    platform = Platform(spark, tmp_path, {REMOTE_ENV: url})
    make_bronze(spark, platform.spec.source, [(1, "ada", 10)])
    done = platform.cli("run", "people")
    assert done.returncode == 2, done.stderr[-4000:]
    assert f"cannot use the Spark Connect server at {url}" in done.stderr
    assert REMOTE_ENV in done.stderr
    assert not Path(platform.spec.target).exists()  # nothing half-written


def test_a_connect_server_without_delta_is_refused_with_the_command_that_starts_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    with ConnectServer(tmp_path / "plain", delta=False) as server:
        platform = Platform(spark, tmp_path, {REMOTE_ENV: server.start().url})
        make_bronze(spark, platform.spec.source, [(1, "ada", 10)])
        done = platform.cli("run", "people")
    assert done.returncode == 2, done.stderr[-4000:]
    assert f"the Spark Connect server at {server.url} has no Delta Lake configured" in done.stderr
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in done.stderr
    assert not Path(platform.spec.target).exists()  # nothing half-written


def test_three_processes_share_the_metastore_names_and_a_recreated_source_is_detected(
    metastore: HiveMetastore,
    connect_server: ConnectServer,
    s3_server: LocalS3Server,
    tmp_path: Path,
) -> None:
    """A long-lived `cdf-platform` process (local Spark) creates bronze by name and runs the
    first load, which creates and registers silver; a Dagster run in a process of its own runs
    the first increment; a `cdf-platform` process on the Connect server (a third Spark
    application, on the same metastore) runs the next; the first process then loses the
    window to a VACUUM, which `status` reports without Java, and rebuilds (the matrix's story in
    local mode on S3 by name); then an application drops bronze's name and creates it again
    elsewhere, and the first process's next run sees the move."""
    lake = f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"
    bronze, silver = "bronze.orders", "silver.orders"
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(metastore.spark_defaults(), encoding="utf-8")
    pipelines = tmp_path / "pipelines.yaml"
    document = {"pipelines": [{"id": "orders", "source": bronze, "target": silver, "keys": ["id"]}]}
    pipelines.write_text(yaml.safe_dump(document), encoding="utf-8")
    local = {
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_LOCAL_IP": "127.0.0.1",
        LAKE_ROOT_ENV: lake,
        MASTER_ENV: "local[2]",
    }
    run = ("run", "orders", "--json", "--pipelines", str(pipelines))
    control = ControlTable(f"{lake}/_control")

    first_log, connect_log = tmp_path / "first.log", tmp_path / "connect.log"
    remote = {LAKE_ROOT_ENV: lake, REMOTE_ENV: connect_server.url, SPARK_LOG_ENV: str(connect_log)}
    with (
        CliSession({**local, SPARK_LOG_ENV: str(first_log)}, first_log, cwd=tmp_path) as first,
        CliSession(remote, connect_log, cwd=tmp_path) as over_connect,
    ):
        for schema in ("bronze", "silver"):
            first.sql(f"CREATE SCHEMA {schema} LOCATION '{_s3a(lake)}/{schema}'")
        first.sql(CREATE_BRONZE.format(t=bronze))
        first.sql(f"INSERT INTO {bronze} VALUES (1, 'ada', 10), (2, 'bob', 20), (3, 'cy', 30)")
        code, output = first.run(*run)
        assert code == 0, output
        assert json.loads(output.splitlines()[-1])["mode"] == "initial_load"
        located = control.read_locations()
        assert located[bronze]["location"] == f"{_s3a(lake)}/bronze/orders"
        assert located[silver]["location"] == f"{_s3a(lake)}/silver/orders"
        first.sql(f"UPDATE {bronze} SET amount = 11 WHERE id = 1")  # 2
        first.sql(f"DELETE FROM {bronze} WHERE id = 2")  # 3
        first.sql(f"INSERT INTO {bronze} VALUES (4, 'dee', 40)")  # 4

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
                **local,
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
        assert increment["rows_deleted"] == 1
        # Found where the first process recorded them, silver with the table id its creating
        # run recorded: nothing recorded again.
        assert control.read_locations() == located
        silver_id = DeltaTable(located[silver]["location"]).metadata().id
        assert located[silver]["table_id"] == silver_id

        # The Connect server's application, on the same metastore, runs the next increment.
        first.sql(f"UPDATE {bronze} SET amount = 31 WHERE id = 3")  # 5
        code, output = over_connect.run(*run)
        assert code == 0, output
        third = json.loads(output.splitlines()[-1])
        assert (third["mode"], third["start_version"], third["end_version"]) == (
            "incremental",
            5,
            5,
        )
        assert control.read_locations() == located
        expected = [[1, "ada", 11], [3, "cy", 31], [4, "dee", 40]]
        assert over_connect.sql(f"SELECT id, name, amount FROM {silver} ORDER BY id") == expected
        assert first.sql(f"SELECT id, name, amount FROM {silver} ORDER BY id") == expected

        # The window is lost (the change files of 6 vacuumed): `status` says so from the logs
        # alone, and the first process's next run rebuilds from bronze's snapshot.
        first.sql(f"DELETE FROM {bronze} WHERE id = 4")  # 6
        check = "spark.databricks.delta.retentionDurationCheck.enabled"
        first.sql(f"SET {check} = false")
        first.sql(f"VACUUM {bronze} RETAIN 0 HOURS")
        first.sql(f"SET {check} = true")
        status = status_without_java(pipelines, {LAKE_ROOT_ENV: lake})
        assert (status["state"], status["watermark"]) == ("LOST", 5), status
        assert status["problem_code"] == "WATERMARK_OUTSIDE_RETENTION"
        latest = DeltaLog(located[bronze]["location"]).latest_version()  # 6, or 8 with VACUUM's
        code, output = first.run(*run)
        assert code == 0, output
        rebuilt = json.loads(output.splitlines()[-1])
        assert (rebuilt["mode"], rebuilt["end_version"]) == ("rebuild", latest), rebuilt
        assert rebuilt["incident_code"] == "WATERMARK_OUTSIDE_RETENTION"
        expected = [[1, "ada", 11], [3, "cy", 31]]
        assert first.sql(f"SELECT id, name, amount FROM {bronze} ORDER BY id") == expected
        assert first.sql(f"SELECT id, name, amount FROM {silver} ORDER BY id") == expected
        assert read_silver_state(located[silver]["location"], "orders").watermark == latest
        assert control.read_states()["orders"]["last_commit_version"] == latest
        status = status_without_java(pipelines, {LAKE_ROOT_ENV: lake})
        assert (status["state"], status["watermark"]) == ("OK", latest), status

        # Another application drops the name (a managed table: its files go too) and creates
        # it again elsewhere with other rows.
        over_connect.sql(f"DROP TABLE {bronze}")
        moved = f"{_s3a(lake)}/bronze_moved/orders"
        over_connect.sql(CREATE_BRONZE.format(t=bronze) + f" LOCATION '{moved}'")
        over_connect.sql(f"INSERT INTO {bronze} VALUES (7, 'gus', 70)")
        code, output = first.run(*run)
        assert code == 0, output
        rebuilt = json.loads(output.splitlines()[-1])
        assert (rebuilt["mode"], rebuilt["incident_code"]) == ("rebuild", "SOURCE_RESET"), rebuilt
        assert control.read_locations()[bronze]["location"] == moved
        assert first.sql(f"SELECT id, name, amount FROM {silver}") == [[7, "gus", 70]]
