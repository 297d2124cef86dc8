"""Two lakes on two S3 servers with different endpoints and credentials, reached through the
storage options of the pipelines file and the lake resource alone; and two lakes whose
locations are the same URIs on two servers, side by side in one process: each reader is handed
its lake's options, none is a setting of the process.

Every test here removes AWS_* from the environment (the session's `s3_server` fixture sets them
for a third server), so no reader can fall back to it: moto accepts any key pair, and the
endpoints are what prove that the configured options, per location, are the ones used.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import obstore
import pytest
import yaml
from obstore.store import from_url
from pyspark.sql import SparkSession

from cdf_platform.core.lake import Lake
from cdf_platform.definitions import build_defs
from cdf_platform.deltalog.arrow_rows import arrow_table, delta_schema
from cdf_platform.deltalog.delta_tables import create_delta_table, write_delta_table
from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.orchestration.shared.storage_options_config import StorageOptionsConfig
from cdf_platform.planning.status import pipeline_statuses
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform.services.service import free_port
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import insert, make_bronze, rows, sql
from cdf_platform_tests.cli_process import run_cli
from cdf_platform_tests.lake_platform import last_spark_job_id

SECRETS = {"LAKE_A_SECRET": "lake-a-secret", "LAKE_B_SECRET": "lake-b-secret"}


@pytest.fixture(scope="module")
def lakes() -> Iterator[dict[str, LocalS3Server]]:
    """Server A holds bucket `lake-a`, server B bucket `lake-b`, each on its own port."""
    with LocalS3Server(bucket="lake-a") as a, LocalS3Server(bucket="lake-b") as b:
        yield {"lake-a": a, "lake-b": b}


@pytest.fixture(scope="module")
def twins() -> Iterator[tuple[LocalS3Server, LocalS3Server]]:
    """Two servers, each with a bucket named `twin`: one URI, two different objects."""
    with LocalS3Server(bucket="twin") as one, LocalS3Server(bucket="twin") as two:
        yield one, two


@pytest.fixture(autouse=True)
def configured_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS_* in the environment, and the secrets the configuration refers to."""
    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


def _options(server: LocalS3Server, secret: Any) -> dict[str, Any]:
    return {
        "endpoint": server.endpoint,
        "allow_http": True,
        "region": "us-east-1",
        "access_key_id": f"{server.bucket}-key",
        "secret_access_key": secret,
    }


def _keys(server: LocalS3Server, prefix: str) -> list[str]:
    """The object keys under `prefix` in the server's bucket, listed with explicit options."""
    store = from_url(
        f"s3://{server.bucket}",
        config={k: v for k, v in _options(server, "x").items() if k != "allow_http"},
        client_options={"allow_http": True},
    )
    return [str(meta["path"]) for batch in obstore.list(store, prefix=prefix) for meta in batch]


def _pipelines_file(
    tmp_path: Path,
    run: str,
    storage: dict[str, Any],
    *,
    buckets: tuple[str, str] = ("lake-a", "lake-b"),
    name: str = "pipelines.yaml",
) -> Path:
    pipeline = {
        "id": "people",
        "source": f"s3://{buckets[0]}/{run}/bronze/people",
        "target": f"s3://{buckets[1]}/{run}/silver/people",
        "keys": ["id"],
        "min_headroom_hours": 1,
    }
    file = tmp_path / name
    file.write_text(yaml.safe_dump({"pipelines": [pipeline], "storage": storage}))
    return file


COLUMNS = {"id": "long", "name": "string", "amount": "integer"}


def _bronze(lake: Lake, source: str, commits: int) -> None:
    """Bronze at `source` (CDF on) with `commits` appends of one row, written by deltalake with
    the options of `lake`."""
    cdf = {"delta.enableChangeDataFeed": "true"}
    create_delta_table(source, lake.storage, delta_schema(COLUMNS), configuration=cdf)
    for key in range(1, commits + 1):
        row = {"id": key, "name": f"n{key}", "amount": key}
        write_delta_table(source, lake.storage, arrow_table(COLUMNS, [row]), mode="append")


def test_bronze_on_lake_a_silver_on_lake_b_from_the_pipelines_file_and_the_lake_resource(
    spark: SparkSession,
    spark_resource: SparkResource,
    lakes: dict[str, LocalS3Server],
    tmp_path: Path,
) -> None:
    """Lake A is configured in the pipelines file, lake B in the lake resource (secret as a
    dg.EnvVar); the incremental job runs in the session's SparkSession (bronze read from A,
    silver written to B, control tables on A) and the checks read both lakes without Spark."""
    a, b = lakes["lake-a"], lakes["lake-b"]
    run = uuid.uuid4().hex[:12]
    file = _pipelines_file(tmp_path, run, {"s3://lake-a": _options(a, {"env": "LAKE_A_SECRET"})})
    lake_b = StorageOptionsConfig(**_options(b, dg.EnvVar("LAKE_B_SECRET")))
    layout = LakeLayout(
        lake_root=f"s3://lake-a/{run}", pipelines_file=str(file), storage={"s3://lake-b": lake_b}
    )
    defs = build_defs(layout, spark_resource, automation=False)
    # The session was started for a third server: its S3A default endpoint is neither lake's.
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    assert hadoop.get("fs.s3a.endpoint") not in (a.endpoint, b.endpoint)
    # What a run does: reuse the process's session, the options of its lake applied.
    session = spark_resource.session_on(layout.lake().storage)
    assert hadoop.get("fs.s3a.bucket.lake-b.endpoint") == b.endpoint
    assert hadoop.get("fs.s3a.bucket.lake-a.secret.key") == SECRETS["LAKE_A_SECRET"]
    spec = layout.spec("people")
    make_bronze(session, spec.source, [(1, "ada", 10), (2, "bob", 20)])  # 0, 1

    with dg.instance_for_test() as instance:
        incremental = defs.resolve_job_def("incremental_job")
        assert incremental.execute_in_process(instance=instance).success  # initial load
        sql(session, spec.source, "UPDATE {t} SET amount = 11 WHERE id = 1")  # 2
        assert incremental.execute_in_process(instance=instance).success  # (1, 2]: CDF read
        assert rows(session, spec.target) == [(1, "ada", 11), (2, "bob", 20)]

        insert(session, spec.source, [(3, "cy", 30)])  # 3: silver one version behind
        spark_jobs = last_spark_job_id(spark)
        checks = defs.resolve_job_def("checks_job").execute_in_process(instance=instance)
        assert last_spark_job_id(spark) == spark_jobs  # the checks read both logs JVM-free
    (window,) = [
        e
        for e in checks.get_asset_check_evaluations()
        if e.asset_key == silver_key("people") and e.check_name == REPLAY_WINDOW
    ]
    assert window.passed
    assert (window.metadata["watermark"].value, window.metadata["latest_version"].value) == (
        2,
        "3",
    )
    assert window.metadata["earliest_replayable_version"].value == 0

    # Bronze and the control tables are on server A only, silver on server B only.
    on_a, on_b = _keys(a, run), _keys(b, run)
    assert any(k.startswith(f"{run}/bronze/people/_delta_log/") for k in on_a)
    for table in ("pipeline_state", "load_log"):
        assert any(k.startswith(f"{run}/_control/{table}/_delta_log/") for k in on_a)
    assert any(k.startswith(f"{run}/silver/people/_delta_log/") for k in on_b)
    assert not [k for k in on_a if "/silver/" in k]
    assert not [k for k in on_b if "/bronze/" in k or "/_control/" in k]
    assert layout.control().read_states()["people"]["last_commit_version"] == 2


def test_status_reads_two_lakes_from_the_pipelines_file_and_a_wrong_endpoint_is_classified(
    lakes: dict[str, LocalS3Server], tmp_path: Path
) -> None:
    """`cdf-platform status` with both lakes configured in the pipelines file (JVM-free):
    bronze on A, silver and control tables looked for on B; then the same file with lake B's
    endpoint pointing where nothing listens fails with a classified error naming it."""
    a, b = lakes["lake-a"], lakes["lake-b"]
    run = uuid.uuid4().hex[:12]
    storage = {
        "s3://lake-a": _options(a, {"env": "LAKE_A_SECRET"}),
        "s3://lake-b": _options(b, {"env": "LAKE_B_SECRET"}),
    }
    file = _pipelines_file(tmp_path, run, storage)
    source = f"s3://lake-a/{run}/bronze/people"
    _bronze(Lake.load(lake_root=f"s3://lake-b/{run}", pipelines_file=str(file)), source, 1)
    lake = ("--pipelines", str(file), "--lake-root", f"s3://lake-b/{run}")

    status = run_cli("status", "--json", *lake)
    assert status.returncode == 0, status.stderr
    (figures,) = json.loads(status.stdout)
    assert (figures["state"], figures["watermark"], figures["latest_version"]) == (
        "NOT_STARTED",
        None,
        1,
    )

    nowhere = f"http://127.0.0.1:{free_port()}"
    storage["s3://lake-b"]["endpoint"] = nowhere
    _pipelines_file(tmp_path, run, storage)
    failed = run_cli("status", "--json", *lake)
    assert failed.returncode == 2, failed.stdout
    assert failed.stderr.startswith("StorageUnreachable [table=s3://lake-b/"), failed.stderr
    assert f"storage prefix s3://lake-b ({file}, endpoint {nowhere})" in failed.stderr
    assert "What to do: check the endpoint, region and credentials" in failed.stderr


def test_two_lakes_with_the_same_uris_on_two_servers_live_side_by_side_in_one_process(
    twins: tuple[LocalS3Server, LocalS3Server], tmp_path: Path
) -> None:
    """Two lakes name the same locations (`s3://twin/...`) and configure the same prefix for
    two different servers: no setting of the process could serve both. Their definitions load
    one after the other, then their checks and statuses run interleaved (JVM-free), each
    reading its own server: lake one's bronze has 1 commit after its CREATE, lake two's 3."""
    run = uuid.uuid4().hex[:12]
    lakes: list[Lake] = []
    layouts: list[LakeLayout] = []
    for index, (server, commits) in enumerate(zip(twins, (1, 3), strict=True)):
        storage = {"s3://twin": _options(server, {"env": "LAKE_A_SECRET"})}
        file = _pipelines_file(
            tmp_path, run, storage, buckets=("twin", "twin"), name=f"lake{index}.yaml"
        )
        layout = LakeLayout(lake_root=f"s3://twin/{run}", pipelines_file=str(file))
        lake = layout.lake()
        _bronze(lake, lake.specs()[0].source, commits)
        lakes.append(lake)
        layouts.append(layout)
    # Both definitions loaded before anything is read: the second one's configuration of
    # `s3://twin` replaces nothing the first one's readers use.
    defs = [build_defs(layout, automation=False) for layout in layouts]

    for _ in range(2):  # interleaved: one, two, one, two
        for lake, definitions, latest in zip(lakes, defs, (1, 3), strict=True):
            control = ControlTable(lake.control_root, storage=lake.storage)
            (status,) = pipeline_statuses(lake.specs(), control)
            assert (status.state.value, status.latest_version) == ("NOT_STARTED", latest)
            with dg.instance_for_test() as instance:
                checks = definitions.resolve_job_def("checks_job").execute_in_process(
                    instance=instance
                )
            (window,) = [
                e
                for e in checks.get_asset_check_evaluations()
                if e.asset_key == silver_key("people") and e.check_name == REPLAY_WINDOW
            ]
            assert window.metadata["latest_version"].value == str(latest)

    # Each lake's objects are on its own server only.
    for server, commits in zip(twins, (1, 3), strict=True):
        logged = [k for k in _keys(server, run) if "/bronze/people/_delta_log/" in k]
        assert len([k for k in logged if k.endswith(".json")]) == commits + 1
