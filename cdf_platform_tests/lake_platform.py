"""The platform's real Definitions on a test lake: a pipelines file, resources pointed at the
lake, and small helpers to materialize, run jobs and read tables back."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg
from pyspark.sql import SparkSession

from cdf_platform.core.sql import sql_path
from cdf_platform.demo.demo_definitions import build_demo_defs
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_testkit.lake import write_pipelines
from cdf_platform_testkit.sensors import incremental_tick as incremental_tick
from cdf_platform_testkit.sensors import sensor_tick as sensor_tick
from cdf_platform_tests.bronze import rows

ORDERS = {
    "id": "orders",
    "source": "bronze/orders",
    "target": "silver/orders",
    "keys": ["order_id"],
    "delete_mode": "hard",
    "max_allowed_lag_hours": 24,
    "min_headroom_hours": 1,
}
CUSTOMERS = {
    "id": "customers",
    "source": "bronze/customers",
    "target": "silver/customers",
    "keys": ["customer_id"],
    "delete_mode": "soft",
    "exclude_columns": ["email"],
}


def control_for(lake: Path, *pipelines: dict[str, Any]) -> LakeLayout:
    """A lake layout on `lake` whose pipelines file lists `pipelines`."""
    pipelines_file = write_pipelines(lake / "pipelines.yaml", pipelines or (ORDERS, CUSTOMERS))
    return LakeLayout(lake_root=str(lake), pipelines_file=str(pipelines_file))


def lake_defs(
    spark_resource: SparkResource,
    lake: Path,
    *pipelines: dict[str, Any],
    allow_destructive: bool = False,
) -> dg.Definitions:
    """The demo's Definitions (the platform's, with the demo bronze writers and gold) on
    `lake`, sharing the test SparkSession; destructive run configs refused unless
    `allow_destructive`."""
    return build_demo_defs(
        control_for(lake, *pipelines), spark_resource, allow_destructive=allow_destructive
    )


def materialize(
    defs: dg.Definitions,
    *keys: dg.AssetKey,
    instance: dg.DagsterInstance,
    checks: tuple[dg.AssetCheckKey, ...] = (),
    run_config: dict[str, Any] | None = None,
    raise_on_error: bool = True,
) -> dg.ExecuteInProcessResult:
    """`dg.materialize` of `keys` and their checks (plus other `checks`) with the definitions'
    assets, checks and resources."""
    assets = [*(defs.assets or []), *(defs.asset_checks or [])]
    return dg.materialize(
        assets,  # type: ignore[arg-type]
        selection=dg.AssetSelection.assets(*keys) | dg.AssetSelection.checks(*checks),
        resources=dict(defs.resources or {}),
        instance=instance,
        run_config=run_config,
        raise_on_error=raise_on_error,
    )


def bronze_batch(
    defs: dg.Definitions, table: str, instance: dg.DagsterInstance, batch_size: int
) -> dict[str, Any]:
    """Materialize one demo batch of `bronze/<table>`; return its metadata values."""
    key = dg.AssetKey(["bronze", table])
    result = materialize(
        defs,
        key,
        instance=instance,
        run_config={"ops": {f"bronze__{table}": {"config": {"batch_size": batch_size}}}},
    )
    return materialization(result, key)


def run_as_daemon(
    defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest
) -> dg.ExecuteInProcessResult:
    """`request` (the incremental sensor's) run as the daemon runs it: incremental_job on the
    request's asset selection, with the job's tags and the request's; a failure is a result."""
    job = defs.resolve_job_def("incremental_job")
    return job.execute_in_process(
        instance=instance,
        asset_selection=request.asset_selection,
        tags={**job.tags, **(request.tags or {})},
        raise_on_error=False,
    )


def materialization(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> dict[str, Any]:
    """The metadata values of the one materialization of `key` in `result`."""
    (materialized,) = result.asset_materializations_for_node(key.to_python_identifier())
    return {name: value.value for name, value in materialized.metadata.items()}


def table_rows(spark: SparkSession, path: str, *columns: str) -> list[tuple[Any, ...]]:
    """Sorted tuples of `columns` (default: columns not starting with `_`) of a Delta table,
    values as Spark's `collect()` gives them (`cdf_platform_tests.bronze.rows`)."""
    return rows(spark, path, *columns)


def last_spark_job_id(spark: SparkSession) -> int:
    """The id of the latest Spark job run in this process (-1 if none).

    Dagster runs a copy of each resource, so a resource object's own state cannot show whether
    a run started Spark; the shared SparkContext's job ids can (they only grow).
    """
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(), default=-1)


def expected_totals(spark: SparkSession, silver: str) -> list[tuple[Any, ...]]:
    """Live orders and revenue per customer, recomputed from silver orders' current rows."""
    live = (
        "NOT _is_deleted"
        if "_is_deleted" in spark.read.format("delta").load(silver).columns
        else "true"
    )
    rows = spark.sql(
        f"""
        SELECT customer_id, COUNT(*), CAST(SUM(amount) AS DECIMAL(22,2))
        FROM {sql_path(silver)} WHERE {live} GROUP BY customer_id
        """
    ).collect()
    return sorted(tuple(row) for row in rows)


@contextmanager
def spark_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """Set Spark confs for the block, then unset them (the session is shared)."""
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in conf:
            spark.conf.unset(key)


def vacuum_breaking_the_window(spark: SparkSession, bronze: str) -> None:
    """A too-short retention and `VACUUM ... RETAIN 0 HOURS` delete the change files silver
    still needs; then the operator restores the default retention (too late)."""
    table = sql_path(bronze)
    retention = "'delta.deletedFileRetentionDuration'"
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({retention} = 'interval 1 seconds')")
    time.sleep(1.5)  # the change files become older than the retention
    with spark_conf(
        spark,
        {
            "spark.databricks.delta.retentionDurationCheck.enabled": "false",
            # VACUUM lists files with this many tasks (default 10000): slow on a tiny table.
            "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
        },
    ):
        spark.sql(f"VACUUM {table} RETAIN 0 HOURS")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({retention} = 'interval 7 days')")


def failure_incident(result: dg.ExecuteInProcessResult) -> str | None:
    """The incident code of the run's (first) failed step, None when no step failed."""
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        user_data = event.step_failure_data.user_failure_data
        code = user_data.metadata.get("incident_code") if user_data else None
        return str(code.value) if code is not None else None
    return None


def check_figures(
    instance: dg.DagsterInstance,
    key: dg.AssetKey,
    check: str,
    name: str,
    kind: type[dg.IntMetadataValue] | type[dg.FloatMetadataValue] | type[dg.BoolMetadataValue],
) -> list[Any]:
    """Figure `name` of every stored evaluation of `check` on `key`, oldest first, as the UI
    plots them, read back from the instance; each must be of the metadata type `kind`."""
    records = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(key, check), limit=50
    )
    figures = []
    for record in reversed(records):
        evaluation = record.evaluation
        if not isinstance(evaluation, dg.AssetCheckEvaluation):
            continue  # planned in a run that ended before evaluating it
        value = evaluation.metadata[name]
        assert isinstance(value, kind), (name, value)
        assert value.value is not None
        figures.append(value.value)
    return figures
