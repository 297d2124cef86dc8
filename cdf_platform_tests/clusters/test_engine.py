"""The warm engine (`cdf-platform engine`): its conf (the operator's settings win, Delta's stay,
credentials never on a command line), runs over it in sessions of their own (a conf another
client set never reaches a run), and a run whose engine was killed and restarted under it
failing as `EngineUnavailable` (retryable, said in words), then applied exactly once by its retry
in a new session, and a run started while the engine is away waiting for it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from cdf_platform.core.config import JVM_FREE_MERGE_MAX_ROWS_ENV, LAKE_ROOT_ENV, PIPELINES_FILE_ENV
from cdf_platform.demo.data.events import folded_rows, write_event_batch
from cdf_platform.spark.runtime.engine import (
    EngineSettings,
    engine_command,
    engine_conf,
    write_properties,
)
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.orders_bronze import write_orders_batch
from cdf_platform_testkit.spark_servers import Engine
from cdf_platform_tests.cli_process import run_cli
from cdf_platform_tests.lake_platform import table_rows

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.heavy,
    pytest.mark.long(minutes=3),
    pytest.mark.timeout(900),
]


def _lake(root: Path, *pipeline_ids: str) -> dict[str, str]:
    """A lake under `root` with a demo `orders` bronze table (one batch) per pipeline, and the
    environment that names it."""
    lake = root / "lake"
    pipelines = root / "pipelines.yaml"
    specs = [orders_pipeline(pipeline_id) for pipeline_id in pipeline_ids]
    pipelines.write_text(yaml.safe_dump({"pipelines": specs}), encoding="utf-8")
    for pipeline_id in pipeline_ids:
        write_orders_batch(str(lake / "bronze" / pipeline_id), batch_size=30)
    return {LAKE_ROOT_ENV: str(lake), PIPELINES_FILE_ENV: str(pipelines)}


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    root = tmp_path_factory.mktemp("engine")
    env = _lake(root, "iso", "lost")
    with Engine(root / "servers", env) as server:
        yield server.start()


def test_engine_conf_lets_the_operator_win_keeps_delta_and_keeps_secrets_off_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        "spark.scheduler.mode   FIFO\n"
        "# a comment\n"
        "spark.sql.extensions=com.example.Other\n"
        "spark.driver.memory: 12g\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf_dir))
    settings = EngineSettings(
        remote="sc://127.0.0.1:15123",
        master="local[2]",
        conf={"spark.sql.shuffle.partitions": "3"},
    )
    conf = engine_conf(settings)
    # spark-defaults.conf wins over the platform's defaults (Spark loads it beside ours) ...
    assert "spark.scheduler.mode" not in conf
    assert "spark.driver.memory" not in conf
    # ... but not over Delta's, without which no run could use the engine.
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    assert conf["spark.jars.packages"].startswith("io.delta:delta-spark_")
    # The operator's --conf wins over everything; the engine listens where the URL says.
    assert conf["spark.sql.shuffle.partitions"] == "3"
    assert (
        conf["spark.connect.grpc.binding.address"],
        conf["spark.connect.grpc.binding.port"],
    ) == ("127.0.0.1", "15123")

    # Credentials from the pipelines file reach the engine in a file only its owner reads.
    env = _lake(tmp_path, "p")
    pipelines = Path(env[PIPELINES_FILE_ENV])
    document = yaml.safe_load(pipelines.read_text(encoding="utf-8"))
    document["storage"] = {
        "s3://lake-bucket": {
            "endpoint": "http://127.0.0.1:9",
            "access_key_id": "AKIAENGINETEST",
            "secret_access_key": {"env": "ENGINE_TEST_SECRET"},
        }
    }
    pipelines.write_text(yaml.safe_dump(document), encoding="utf-8")
    secret = "engine-test-secret-value"
    env["ENGINE_TEST_SECRET"] = secret
    printed = run_cli("engine", "--print", env=env)
    assert printed.returncode == 0, printed.stderr
    assert secret not in printed.stdout + printed.stderr
    assert "secret.key=*****" in printed.stdout
    # A URL that is no Spark Connect URL, and a --conf that is no KEY=VALUE, are refused.
    wrong = run_cli("engine", "--print", "--remote", "http://127.0.0.1:15002", env=env)
    assert wrong.returncode == 2
    assert "RuntimeEnvironmentError" in wrong.stderr
    assert "set $CDF_SPARK_REMOTE (or --remote) to sc://<host>:<port>" in wrong.stderr
    assert run_cli("engine", "--print", "--conf", "spark.x", env=env).returncode == 2
    properties = write_properties({"spark.hadoop.fs.s3a.secret.key": secret}, tmp_path / "p")
    assert stat.S_IMODE(properties.stat().st_mode) == 0o600
    assert secret in properties.read_text(encoding="utf-8")
    assert not [arg for arg in engine_command(settings, properties) if secret in arg]


# Another client of the engine that sets, in its own session, what would hurt a run if it
# leaked: the conf that turns a lost window into silent loss, and a txn stamp.
_INTRUDER = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    spark.conf.set("spark.databricks.delta.write.txnAppId", "intruder")
    spark.conf.set("spark.databricks.delta.write.txnVersion", "999")
    print(spark.session_id, flush=True)
    sys.stdin.readline()
    """
)


def _silver_apps(path: str) -> set[str]:
    """Every txn app id silver's log holds."""
    apps: set[str] = set()
    for commit in sorted((Path(path) / "_delta_log").glob("*.json")):
        for line in commit.read_text(encoding="utf-8").splitlines():
            action = json.loads(line)
            if "txn" in action:
                apps.add(action["txn"]["appId"])
    return apps


def test_each_run_on_the_engine_has_a_session_of_its_own(
    engine: Engine, spark: SparkSession
) -> None:
    env = {**engine.env, **engine.client_env()}
    lake = Path(env[LAKE_ROOT_ENV])
    intruder = subprocess.Popen(
        [sys.executable, "-c", _INTRUDER, engine.url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    try:
        assert intruder.stdout is not None and intruder.stdout.readline().strip()
        for _ in range(2):  # the initial load, then an incremental run
            done = run_cli("run", "iso", "--json", env=env)
            assert done.returncode == 0, done.stderr
            write_orders_batch(str(lake / "bronze" / "iso"), batch_size=30)
        done = run_cli("run", "iso", "--json", env=env)
        assert done.returncode == 0, done.stderr
    finally:
        assert intruder.stdin is not None
        intruder.stdin.close()
        intruder.wait(timeout=60)
    silver, bronze = str(lake / "silver" / "iso"), str(lake / "bronze" / "iso")
    assert json.loads(done.stdout)["mode"] == "incremental"
    assert _silver_apps(silver) == {"iso"}
    assert DeltaTable(silver).transaction_version("iso") == DeltaTable(bronze).version()
    assert table_rows(spark, silver) == table_rows(spark, bronze)


def test_an_event_log_pipeline_runs_on_the_engine(
    engine: Engine, spark: SparkSession, tmp_path: Path
) -> None:
    """The demo's Debezium log (`changes: events`), loaded then applied incrementally (its
    deletes kept as tombstones) over Spark Connect: the engine loads no Delta Connect plugin,
    so nothing of an event-log run may use Delta's Python table API."""
    lake, pipelines = tmp_path / "lake", tmp_path / "pipelines.yaml"
    (spec,) = [
        pipeline
        for pipeline in yaml.safe_load(Path("pipelines.yaml").read_text(encoding="utf-8"))[
            "pipelines"
        ]
        if pipeline.get("changes") == "events"
    ]
    pipelines.write_text(yaml.safe_dump({"pipelines": [spec]}), encoding="utf-8")
    env = {LAKE_ROOT_ENV: str(lake), PIPELINES_FILE_ENV: str(pipelines), **engine.client_env()}
    bronze, silver = str(lake / spec["source"]), str(lake / spec["target"])
    modes = []
    for _ in range(3):  # the initial load, then two incremental runs
        write_event_batch(bronze, batch_size=40)
        done = run_cli("run", spec["id"], "--json", env=env)
        assert done.returncode == 0, done.stderr
        modes.append(json.loads(done.stdout)["mode"])
    assert modes == ["initial_load", "incremental", "incremental"]
    columns = [c for c in spark.read.format("delta").load(silver).columns if c[0] != "_"]
    assert Counter(table_rows(spark, silver, *columns)) == folded_rows(bronze, columns)


# A run process whose engine is killed and restarted between two runs: the first run after
# the restart meets the lost session (EngineUnavailable, retryable); the resource then drops
# it, as the Dagster steps do (`mark_retryable_run`), and the retry applies the range once.
_SURVIVOR = textwrap.dedent(
    """
    import json, os, sys
    from cdf_platform.core.errors import EngineUnavailable
    from cdf_platform.orchestration.shared.resources import LakeLayout
    from cdf_platform.orchestration.shared.spark_resource import SparkResource
    from cdf_platform.run import PipelineRunner
    from cdf_platform_testkit.orders_bronze import write_orders_batch

    lake = LakeLayout.from_environment().bound()
    spark = SparkResource(remote=os.environ["CDF_SPARK_REMOTE"])
    control = lake.control()
    runner = PipelineRunner(
        control, lambda short: spark.session_for_run(short=short, storage=control.storage)
    )
    spec = lake.spec("lost")
    print(json.dumps({"first": runner.run(spec).mode.value}), flush=True)
    sys.stdin.readline()  # the engine is killed and restarted meanwhile
    write_orders_batch(spec.source, batch_size=30)
    try:
        runner.run(spec)
        failed = None
    except EngineUnavailable as err:
        failed = {"retryable": err.retryable, "code": err.incident_code, "message": str(err)}
        spark.discard_session()
    again = runner.run(spec)
    print(json.dumps({"failed": failed, "again": again.mode.value}), flush=True)
    sys.stdin.readline()  # the engine is killed now, and stays away a while
    write_orders_batch(spec.source, batch_size=30)
    print(json.dumps({"waited": runner.run(spec).mode.value}), flush=True)
    """
)
# How long the engine stays away under the survivor's third run, which waits for it.
ENGINE_AWAY_S = 15.0


def test_a_run_whose_engine_restarted_fails_retryable_and_one_started_while_it_is_away_waits(
    engine: Engine, spark: SparkSession
) -> None:
    # Runs that need the engine (small SCD1 change sets would not).
    env = {**engine.env, **engine.client_env(), JVM_FREE_MERGE_MAX_ROWS_ENV: "0"}
    survivor = subprocess.Popen(
        [sys.executable, "-c", _SURVIVOR],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    assert survivor.stdout is not None and survivor.stdin is not None
    first = json.loads(survivor.stdout.readline())
    assert first == {"first": "initial_load"}
    engine.kill()
    engine.start()
    survivor.stdin.write("go\n")
    survivor.stdin.flush()
    outcome = json.loads(survivor.stdout.readline())
    # The lost session is said in words, with nothing to fix: the engine is running.
    message = outcome["failed"].pop("message")
    assert "session on the engine was lost" in message, message
    assert "_InactiveRpcError" not in message and "start the engine" not in message, message
    assert outcome == {
        "failed": {"retryable": True, "code": "ENGINE_UNAVAILABLE"},
        "again": "incremental",
    }
    # A run started while the engine is away waits for it, says so, and goes on once it is back.
    engine.kill()
    survivor.stdin.write("go\n")
    survivor.stdin.flush()
    time.sleep(ENGINE_AWAY_S)
    engine.start()
    line = survivor.stdout.readline()
    assert survivor.stderr is not None
    assert line, survivor.stderr.read()
    waited = json.loads(line)
    assert survivor.wait(timeout=300) == 0
    assert waited == {"waited": "incremental"}
    said = survivor.stderr.read()
    assert f"engine unreachable at {engine.url} since" in said, said
    assert f"engine at {engine.url} answers again after" in said, said
    lake = Path(env[LAKE_ROOT_ENV])
    silver, bronze = str(lake / "silver" / "lost"), str(lake / "bronze" / "lost")
    assert table_rows(spark, silver) == table_rows(spark, bronze)
    # Applied once: the retry's commit is the only incremental one.
    modes = [
        json.loads(entry["userMetadata"])["cdf_platform"]["mode"]
        for entry in DeltaTable(silver).history()
        if entry.get("userMetadata")
    ]
    assert sorted(modes) == ["incremental", "incremental", "initial_load"]
