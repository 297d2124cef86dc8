"""What the secrets system test (`test_deployment.py`) needs: the secrets deployment's code
location, its bronze writes, and the searches for a secret value.

Secrets never leave the environment: the deployment of deploy/ (PostgreSQL, the daemon, the
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
from pathlib import Path

import dagster as dg
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform_testkit.postgres import PostgresServer

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
    from cdf_platform.orchestration.shared.resources import LakeLayout
    from cdf_platform.orchestration.shared.storage_options_config import StorageOptionsConfig


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


def s3_options(s3: LocalS3Server, key: str, secret: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": s3.endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": key,
        "AWS_SECRET_ACCESS_KEY": secret,
    }


def orders_table(keys: list[int], amount: int) -> pa.Table:
    return pa.table(
        {
            "order_id": pa.array(keys, pa.int64()),
            "amount": pa.array([float(amount + n) for n in keys], pa.float64()),
            "status": pa.array(["open"] * len(keys), pa.string()),
        }
    )


def write_bronze(uri: str, table: pa.Table, options: dict[str, str]) -> None:
    write_deltalake(
        uri,
        table,
        mode="append",
        configuration={"delta.enableChangeDataFeed": "true"},
        storage_options=options,
    )


def hits(text: str, secrets: dict[str, str], where: str) -> list[str]:
    return [f"{name} in {where}" for name, value in secrets.items() if value in text]


def database_hits(postgres: PostgresServer, secrets: dict[str, str]) -> list[str]:
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
            found += hits(text, secrets, f"table {table}")
    return found


def lake_hits(s3: LocalS3Server, options: dict[str, str], secrets: dict[str, str]) -> list[str]:
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
                found += hits(body.decode("latin-1"), secrets, f"s3://{bucket}/{key}")
                if "/_delta_log/" in key:
                    tables.add(f"s3://{bucket}/{key.split('/_delta_log/')[0]}")
    assert any(table.endswith("/_control/load_log") for table in tables), tables
    for uri in sorted(tables):
        rows = QueryBuilder().register("t", DeltaTable(uri, storage_options=options))
        read = rows.execute("SELECT * FROM t").read_all()
        text = str([column.to_pylist() for column in read.columns])
        found += hits(text, secrets, f"the rows of {uri}")
    return found


def file_hits(root: Path, secrets: dict[str, str]) -> list[str]:
    found: list[str] = []
    for path in root.rglob("*"):
        if path.is_file():
            found += hits(path.read_bytes().decode("latin-1"), secrets, str(path))
    return found


def table_version(uri: str, options: dict[str, str]) -> int:
    """The latest version of the Delta table at `uri`, -1 while there is none."""
    try:
        return int(DeltaTable(uri, storage_options=options).version())
    except Exception:  # no table there yet (deltalake raises its own TableNotFoundError)
        return -1


def runs_of_instance(instance: dg.DagsterInstance, job: str | None = None) -> list[dg.DagsterRun]:
    records = instance.get_run_records(dg.RunsFilter(job_name=job) if job else None)
    return [record.dagster_run for record in records]
