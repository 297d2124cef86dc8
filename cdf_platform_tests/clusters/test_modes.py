"""The core story once per way of running Spark: in this process (`local[*]`), on a standalone
cluster (`CDF_SPARK_MASTER=spark://...`), and over Spark Connect (`CDF_SPARK_REMOTE=sc://...`).

Cluster and Connect runs are the `cdf-platform` CLI in a subprocess, configured only by the
environment, as a user runs it (on the cluster, the story's runs are commands of one CLI
process, so its application starts once: `cli_session.py`); the test's own Spark session
writes bronze and reads the result. The lake is a local folder every process (driver,
executors, Connect server) shares. Select alone with `pytest -m cluster`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import pytest
import yaml
from pyspark.sql import SparkSession

from cdf_platform.core.config import LAKE_ROOT_ENV, MASTER_ENV, REMOTE_ENV, SPARK_LOG_ENV
from cdf_platform.core.faults import FAULT_ENV, FAULT_EXIT_CODE, FaultPoint
from cdf_platform.core.spec_file import find_spec, load_specs
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.demo.local_s3 import free_port
from cdf_platform.planning.status import pipeline_status
from cdf_platform.runner import run_pipeline
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.bronze import (
    assert_converged_after_kill,
    insert,
    make_bronze,
    rows,
    sql,
    vacuum_retain_zero,
)
from cdf_platform_tests.cli_process import run_cli
from cdf_platform_tests.cli_session import CliSession
from cdf_platform_tests.clusters.servers import ConnectServer, StandaloneCluster

pytestmark = pytest.mark.cluster

PEOPLE = {"id": "people", "source": "bronze/people", "target": "silver/people", "keys": ["id"]}


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A standalone master and one worker (2 cores, 2 GiB) for this module."""
    with StandaloneCluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster.start()


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    """A Spark Connect server with Delta for this module."""
    with ConnectServer(tmp_path_factory.mktemp("connect")) as server:
        yield server.start()


class Platform:
    """`cdf-platform` on one lake, with Spark in one of the three modes."""

    def __init__(self, spark: SparkSession, lake: Path, env: dict[str, str], **fields: Any):
        self.spark, self.lake, self.env = spark, lake, env
        self.session: CliSession | None = None
        self.cluster: StandaloneCluster | None = None
        self.apps_before: set[str] = set()
        self.pipelines = lake.parent / "pipelines.yaml"
        self.pipelines.write_text(
            yaml.safe_dump({"pipelines": [{**PEOPLE, **fields}]}), encoding="utf-8"
        )
        self.spec = find_spec(load_specs(self.pipelines, lake_root=str(lake)), "people")
        self.control = ControlTable(str(lake / "_control"))

    def cli(self, *args: str, env: dict[str, str] | None = None) -> CompletedProcess[str]:
        """`cdf-platform <args> --json` in a subprocess configured by the environment."""
        return run_cli(
            *args,
            "--json",
            "--pipelines",
            str(self.pipelines),
            env={LAKE_ROOT_ENV: str(self.lake), **self.env, **(env or {})},
        )

    def run(self) -> dict[str, Any]:
        """One run of the pipeline: its result figures."""
        if not self.env:  # local: the test's own session, as `cdf-platform run` would build
            return run_pipeline(
                self.spec, spark_factory=lambda: self.spark, control=self.control
            ).as_metadata()
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

    def assert_ran_on_the_cluster(self) -> None:
        """The runs since `on_cluster` were one application of the master's, granted the
        worker's cores, with its executor on the worker (the master's and worker's `/json/`).
        A driver on a standalone master runs no task itself, so the executors did the work;
        a run in local mode (the master setting ignored) leaves the master no application."""
        assert self.cluster is not None
        new = {
            app_id: app
            for app_id, app in self.cluster.applications().items()
            if app_id not in self.apps_before
        }
        assert len(new) == 1, f"the master ran {len(new)} applications for the runs: {new}"
        ((app_id, app),) = new.items()
        assert (app["name"], app["cores"]) == ("cdf_platform", self.cluster.cores), app
        assert app_id in self.cluster.executor_apps(), f"no executor of {app_id} on the worker"

    def on_cluster(self, cluster: StandaloneCluster) -> None:
        """Note the cluster's applications so far: `assert_ran_on_the_cluster` counts new ones."""
        self.cluster, self.apps_before = cluster, set(cluster.applications())

    def with_session(self, log: Path) -> CliSession:
        """Run the following `run()`s as commands of one long-lived CLI process."""
        env = {LAKE_ROOT_ENV: str(self.lake), SPARK_LOG_ENV: str(log), **self.env}
        self.session = CliSession(env, log)
        return self.session


@pytest.fixture(params=["local", "standalone", "connect"])
def platform(
    request: pytest.FixtureRequest, spark: SparkSession, tmp_path: Path
) -> Iterator[Platform]:
    """The platform with Spark in each mode (servers started on first use)."""
    env: dict[str, str] = {}
    if request.param == "standalone":
        cluster: StandaloneCluster = request.getfixturevalue("standalone")
        env = {
            MASTER_ENV: cluster.master_url,
            "SPARK_CONF_DIR": str(cluster.conf_dir),
            # The driver binds to loopback like the cluster (Spark picks a routable address).
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
    elif request.param == "connect":
        env = {REMOTE_ENV: request.getfixturevalue("connect_server").url}
    platform = Platform(spark, tmp_path / "lake", env, delete_mode="hard")
    if request.param == "local":
        yield platform
        return
    if request.param == "standalone":
        platform.on_cluster(cluster)
    # One CLI process for the story's runs: on the cluster, one application (driver and
    # executor started once); over Connect, one client (the other Connect tests start a fresh
    # `cdf-platform` process per run).
    with platform.with_session(tmp_path / "cli.log"):
        yield platform


def test_load_increment_lose_the_window_and_rebuild(platform: Platform) -> None:
    spark, spec = platform.spark, platform.spec
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])  # 0, 1
    first = platform.run()
    assert (first["mode"], first["end_version"]) == ("initial_load", 1)

    sql(spark, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 2
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 2")  # 3
    insert(spark, spec.source, [(4, "dee", 40)])  # 4
    second = platform.run()
    assert (second["mode"], second["start_version"], second["end_version"]) == (
        "incremental",
        2,
        4,
    )
    assert second["rows_deleted"] == 1
    assert rows(spark, spec.target) == rows(spark, spec.source)

    sql(spark, spec.source, "UPDATE {t} SET amount = 31 WHERE id = 3")  # 5
    sql(spark, spec.source, "DELETE FROM {t} WHERE id = 4")  # 6
    vacuum_retain_zero(spark, spec.source)
    status = pipeline_status(spec, platform.control).as_dict()  # from the logs, no Spark
    assert (status["state"], status["problem_code"]) == ("LOST", "WATERMARK_OUTSIDE_RETENTION")

    latest = DeltaLog(spec.source).latest_version()  # 6, or 8 with VACUUM's own commits
    rebuilt = platform.run()
    assert (rebuilt["mode"], rebuilt["end_version"]) == ("rebuild", latest)
    assert rebuilt["incident_code"] == "WATERMARK_OUTSIDE_RETENTION"
    assert rows(spark, spec.target) == rows(spark, spec.source) == [(1, "ada", 11), (3, "cy", 31)]
    assert read_silver_state(spec.target, spec.id).watermark == latest
    assert platform.control.read_states()["people"]["last_commit_version"] == latest
    if platform.cluster is not None:
        platform.assert_ran_on_the_cluster()


def test_a_run_killed_after_the_merge_over_spark_connect_reruns_exactly(
    spark: SparkSession, tmp_path: Path, connect_server: ConnectServer
) -> None:
    platform = Platform(
        spark,
        tmp_path / "lake",
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
        tmp_path / "conformed" / "lake",
        remote,
        columns={"amount_x2": "amount * 2"},
        where="amount >= 15",
    )
    make_bronze(spark, conformed.spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    assert conformed.run()["mode"] == "initial_load"
    assert rows(spark, conformed.spec.target) == [(2, "bob", 20, 40), (3, "cy", 30, 60)]

    refused = Platform(spark, tmp_path / "refused" / "lake", remote, columns={"r": "rand()"})
    make_bronze(spark, refused.spec.source, [(1, "ada", 10)])
    done = refused.cli("run", "people")
    assert done.returncode != 0
    assert "InvalidPipelineSpec" in done.stderr and "uses rand" in done.stderr, done.stderr[-2000:]
    assert not Path(refused.spec.target).exists()


def test_an_unreachable_spark_connect_server_is_a_classified_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    url = f"sc://127.0.0.1:{free_port()}"  # nothing listens there
    platform = Platform(spark, tmp_path / "lake", {REMOTE_ENV: url})
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
        platform = Platform(spark, tmp_path / "lake", {REMOTE_ENV: server.start().url})
        make_bronze(spark, platform.spec.source, [(1, "ada", 10)])
        done = platform.cli("run", "people")
    assert done.returncode == 2, done.stderr[-4000:]
    assert f"the Spark Connect server at {server.url} has no Delta Lake configured" in done.stderr
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in done.stderr
    assert not Path(platform.spec.target).exists()  # nothing half-written
