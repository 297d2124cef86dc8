"""Secrets never leave the environment: the deployment of deploy/ (PostgreSQL, the daemon, the
code server, the webserver) runs pipelines on an S3 server whose credentials come from the
pipelines file's `{env: NAME}` (bucket `cdf-a`, which holds the lake's control tables too) and
from a `dg.EnvVar` of the `lake` resource in the code location (bucket `cdf-b`), with a run that
fails and a rebuild launched from the UI. Then each secret value is searched for in every table
of the Dagster database (event log, runs, ticks, check evaluations), every object of both
buckets (Delta logs, data and change files, the control tables' rows: load log, state,
maintenance log), the compute logs of the instance, and every log of the deployment's processes
and of Spark: no hit anywhere."""

from __future__ import annotations

import textwrap
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from cdf_platform.demo.local_s3 import LocalS3Server
from cdf_platform.orchestration.jobs import rebuild_run_config
from cdf_platform_tests.system.deployment import Deployment, wait_for
from cdf_platform_tests.system.postgres import PostgresServer

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

BUCKET_A, BUCKET_B = "cdf-a", "cdf-b"
# The deployment reads no AWS_* variable: every credential comes from its configuration.
NO_AMBIENT_CREDENTIALS = dict.fromkeys(
    (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ALLOW_HTTP",
        "AWS_REGION",
        "AWS_PROFILE",
    )
)

DEFINITIONS = textwrap.dedent(
    '''
    """The code location: the platform's definitions with bucket cdf-b's credentials in the
    lake resource, as dg.EnvVar (the UI shows the variables' names)."""

    import os

    import dagster as dg

    from cdf_platform.definitions import build_defs
    from cdf_platform.orchestration.resources import LakeLayout
    from cdf_platform.orchestration.storage_options import StorageOptionsConfig


    @dg.definitions
    def defs() -> dg.Definitions:
        bucket_b = StorageOptionsConfig(
            endpoint=os.environ["CDF_TEST_S3_ENDPOINT"],
            region="us-east-1",
            allow_http=True,
            access_key_id=dg.EnvVar("CDF_TEST_KEY_B"),
            secret_access_key=dg.EnvVar("CDF_TEST_SECRET_B"),
        )
        lake = LakeLayout(
            lake_root=os.environ["CDF_LAKE_ROOT"],
            pipelines_file=os.environ["CDF_PIPELINES_FILE"],
            storage={"s3://cdf-b": bucket_b},
        )
        return build_defs(lake)
    '''
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def s3() -> Iterator[LocalS3Server]:
    with LocalS3Server(bucket=BUCKET_A) as server:
        request = urllib.request.Request(f"{server.endpoint}/{BUCKET_B}", method="PUT")
        with urllib.request.urlopen(request, timeout=10):
            pass
        yield server


def _options(s3: LocalS3Server, key: str, secret: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
    }


def _orders(keys: list[int], amount: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(keys, pa.int64()),
            "amount": pa.array([float(amount + n) for n in keys], pa.float64()),
            "status": pa.array(["open"] * len(keys), pa.string()),
        }
    )


def _write_bronze(uri: str, table: pa.Table, options: dict[str, str]) -> None:
    write_deltalake(
        uri,
        table,
        mode="append",
        configuration={"delta.enableChangeDataFeed": "true"},
        storage_options=options,
    )


def _hits(text: str, secrets: dict[str, str], where: str) -> list[str]:
    return [f"{name} in {where}" for name, value in secrets.items() if value in text]


def _database_hits(postgres: PostgresServer, secrets: dict[str, str]) -> list[str]:
    """Every row of every table of the Dagster database, as text."""
    found: list[str] = []
    with postgres.connect() as connection, connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
        tables = [str(row[0]) for row in cursor.fetchall()]
        assert "event_logs" in tables and "runs" in tables, tables
        for table in tables:
            cursor.execute(f'SELECT CAST(t AS text) FROM "{table}" t')
            text = "\n".join(str(row[0]) for row in cursor.fetchall())
            found += _hits(text, secrets, f"table {table}")
    return found


def _lake_hits(s3: LocalS3Server, options: dict[str, str], secrets: dict[str, str]) -> list[str]:
    """Every object of both buckets as bytes (logs, checkpoints, data and change files), and
    every row of every Delta table in them, read (compressed Parquet hides a string)."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3.endpoint,
        region_name="us-east-1",
        aws_access_key_id=options["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=options["AWS_SECRET_ACCESS_KEY"],
    )
    found: list[str] = []
    tables: set[str] = set()
    for bucket in (BUCKET_A, BUCKET_B):
        paginator = client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket):
            for item in page.get("Contents", []):
                key = str(item["Key"])
                body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                found += _hits(body.decode("latin-1"), secrets, f"s3://{bucket}/{key}")
                if "/_delta_log/" in key:
                    tables.add(f"s3://{bucket}/{key.split('/_delta_log/')[0]}")
    assert any(table.endswith("/_control/load_log") for table in tables), tables
    for uri in sorted(tables):
        rows = QueryBuilder().register("t", DeltaTable(uri, storage_options=options))
        read = rows.execute("SELECT * FROM t").read_all()
        text = str([column.to_pylist() for column in read.columns])
        found += _hits(text, secrets, f"the rows of {uri}")
    return found


def _file_hits(root: Path, secrets: dict[str, str]) -> list[str]:
    found: list[str] = []
    for path in root.rglob("*"):
        if path.is_file():
            found += _hits(path.read_bytes().decode("latin-1"), secrets, str(path))
    return found


def _version(uri: str, options: dict[str, str]) -> int:
    """The latest version of the Delta table at `uri`, -1 while there is none."""
    try:
        return int(DeltaTable(uri, storage_options=options).version())
    except Exception:  # no table there yet (deltalake raises its own TableNotFoundError)
        return -1


def _runs(instance: dg.DagsterInstance, job: str | None = None) -> list[dg.DagsterRun]:
    records = instance.get_run_records(dg.RunsFilter(job_name=job) if job else None)
    return [record.dagster_run for record in records]


def test_no_secret_reaches_a_log_a_table_or_the_lake(
    postgres: PostgresServer, s3: LocalS3Server, tmp_path_factory: pytest.TempPathFactory
) -> None:
    root: Path = tmp_path_factory.mktemp("secrets")
    secrets = {
        "the pipelines file's {env:} secret": f"envsecret-{uuid.uuid4().hex}",
        "the lake resource's dg.EnvVar secret": f"envvarsecret-{uuid.uuid4().hex}",
    }
    secret_a, secret_b = secrets.values()
    key_a, key_b = f"keya{uuid.uuid4().hex[:12]}", f"keyb{uuid.uuid4().hex[:12]}"
    options_a = _options(s3, key_a, secret_a)
    options_b = _options(s3, key_b, secret_b)

    # Bronze: p1 in bucket a, p2 in bucket b, and `dupes` (bucket a) with a key twice in one
    # commit: its run fails (DATA_QUALITY).
    _write_bronze(f"s3://{BUCKET_A}/bronze/p1", _orders(list(range(1, 21)), 10), options_a)
    _write_bronze(f"s3://{BUCKET_B}/bronze/p2", _orders(list(range(1, 21)), 20), options_b)
    _write_bronze(f"s3://{BUCKET_A}/bronze/dupes", _orders([1, 1, 2], 30), options_a)
    pipelines = {
        "storage": {
            f"s3://{BUCKET_A}": {
                "endpoint": s3.endpoint,
                "region": "us-east-1",
                "allow_http": True,
                "access_key_id": {"env": "CDF_TEST_KEY_A"},
                "secret_access_key": {"env": "CDF_TEST_SECRET_A"},
            }
        },
        "pipelines": [
            {
                "id": pipeline_id,
                "source": f"s3://{bucket}/bronze/{pipeline_id}",
                "target": f"s3://{bucket}/silver/{pipeline_id}",
                "keys": ["order_id"],
            }
            for pipeline_id, bucket in (("p1", BUCKET_A), ("p2", BUCKET_B), ("dupes", BUCKET_A))
        ],
    }
    silvers = {
        f"s3://{BUCKET_A}/silver/p1": options_a,
        f"s3://{BUCKET_B}/silver/p2": options_b,
    }
    definitions = root / "secret_location.py"
    definitions.write_text(DEFINITIONS, encoding="utf-8")
    deployment = Deployment(
        root,
        postgres,
        [],
        warm=False,
        code=["-f", str(definitions)],
        env={
            **NO_AMBIENT_CREDENTIALS,
            "CDF_LAKE_ROOT": f"s3://{BUCKET_A}/lake",
            "CDF_TEST_S3_ENDPOINT": s3.endpoint,
            "CDF_TEST_KEY_A": key_a,
            "CDF_TEST_SECRET_A": secret_a,
            "CDF_TEST_KEY_B": key_b,
            "CDF_TEST_SECRET_B": secret_b,
            "CDF_SPARK_LOG": str(root / "logs" / "spark.log"),
            "SPARK_LOCAL_IP": "127.0.0.1",
        },
    )
    deployment.pipelines_file.write_text(yaml.safe_dump(pipelines), encoding="utf-8")

    with deployment.environment():
        instance = deployment.instance()
        try:
            deployment.start()

            def loaded() -> bool:
                failed = [r for r in _runs(instance) if r.status is dg.DagsterRunStatus.FAILURE]
                return bool(failed) and all(
                    _version(uri, options) >= 1 for uri, options in silvers.items()
                )

            wait_for("p1 and p2 loaded, and a run of dupes failed", loaded, 400, 2)
            launched = deployment.launch(
                "rebuild_job",
                rebuild_run_config("p1").to_config_dict(),
                assets=[("silver", "p1")],
            )
            assert launched["__typename"] == "LaunchRunSuccess", launched
            rebuild = str(launched["run"]["runId"])

            def rebuilt() -> dg.DagsterRun | None:
                run = instance.get_run_by_id(rebuild)
                return run if run is not None and run.is_finished else None

            finished = wait_for("the rebuild of p1", rebuilt, 300, 2)
            assert finished.status is dg.DagsterRunStatus.SUCCESS
            time.sleep(5)  # the sensors' next ticks, with their logs
        finally:
            deployment.stop()
        assert not deployment.processes()

        incidents = [
            str(failure.user_failure_data.metadata["incident_code"].value)
            for run in _runs(instance)
            if run.status is dg.DagsterRunStatus.FAILURE
            for event in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
            if event.dagster_event is not None
            and (failure := event.dagster_event.step_failure_data).user_failure_data is not None
        ]
        assert "DATA_QUALITY" in incidents, incidents
        instance.dispose()

    # Silver was written with those credentials (bucket b's came from the dg.EnvVar only),
    # p1 twice more by its rebuild.
    assert _version(f"s3://{BUCKET_A}/silver/p1", options_a) >= 2

    # Searched: the database, the lake, and every file of the deployment's folder: the
    # instance's compute logs (each step's stdout and stderr, Spark's console among them), the
    # processes' logs, the pipelines file and the code location (which name the variables).
    compute_logs = [p for p in (root / "dagster_home").rglob("*") if p.is_file()]
    assert any("spark" in p.read_text(errors="replace").lower() for p in compute_logs)
    hits = [
        *_database_hits(postgres, secrets),
        *_lake_hits(s3, options_a, secrets),
        *_file_hits(root, secrets),
    ]
    assert not hits, hits
