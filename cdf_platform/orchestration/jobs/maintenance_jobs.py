"""Maintenance: `maintenance_job`, a consumer-aware VACUUM of one table per run (the table by its
asset key in the run config), for every bronze table the pipelines read and every silver table
consumer assets read (docs/design.md section 9); `maintenance_schedule` asks for one run per
table nightly (stopped until an operator turns it on).

A run decides from the logs (no JVM) whether vacuuming now would cut a consumer's replay window
(the pipelines reading the table, and the consumer assets of the watermark IO manager
registered as reading it), raises `delta.deletedFileRetentionDuration` to cover them (up to a
cap) or refuses, and only then starts Spark to vacuum. The decision, the retention sizing (max
expected downtime + recovery buffer, from the load log) and the current setting are the run's
metadata, and an observation on the table's asset. A refusal fails the run, so it is seen: the
table was not vacuumed. `retain_zero` and `allow_window_loss` destroy history a consumer may
need: they run only where the deployment permits destructive actions
(`cdf_platform.orchestration.shared.destructive`). Every run's decision, refusal included, is a
row of the maintenance log, with what it destroyed. The run carries its table as a tag
(`cdf_platform/table`), to find a table's runs in the UI.

One job, not one per table: the daemon reloads every job's snapshot from the code server each
minute, and each job carries the run-config schema of every resource (about 90 KB): a hundred
tables' jobs were most of an idle deployment's reload (`python -m bench.idle_cost`).
"""

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import dagster as dg
from pydantic import Field

from cdf_platform.core.errors import InvalidRunConfig, VacuumRefused
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.shared.destructive import (
    PERMITTED_BY,
    record,
    refuse_unless_permitted,
)
from cdf_platform.orchestration.shared.keys import BRONZE_PREFIX, TABLE_TAG, silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.orchestration.shared.step_failures import platform_failure
from cdf_platform.planning.vacuum import RetentionPolicy, VacuumDecision, plan_vacuum
from cdf_platform.spark.table.vacuum_execution import execute_vacuum
from cdf_platform.state.control import ControlTable


class MaintenanceConfig(dg.Config):
    """Which table a maintenance run vacuums, and how it treats the table's consumers."""

    table: str = Field(
        description="The table to vacuum, by its asset key: `bronze/<table>` (a table the "
        "pipelines read) or `silver/<pipeline id>` (a silver table consumer assets read)."
    )
    policy: RetentionPolicy = Field(
        default=RetentionPolicy.RAISE,
        description="`raise`: raise delta.deletedFileRetentionDuration to cover the consumers "
        "(up to max_retention_hours) before vacuuming; `refuse`: do not vacuum when it does not.",
    )
    buffer_hours: float = Field(
        default=24.0, ge=0, description="Hours kept beyond what each consumer needs right now."
    )
    max_retention_hours: float = Field(
        default=30 * 24.0, gt=0, description="Cap on delta.deletedFileRetentionDuration."
    )
    recovery_buffer_hours: float = Field(
        default=24.0, ge=0, description="Added to the observed downtime in the sizing report."
    )
    retain_zero: bool = Field(
        default=False,
        description="VACUUM RETAIN 0 HOURS (refused while a consumer is behind). Destructive: "
        "refused unless the deployment permits it (CDF_ALLOW_DESTRUCTIVE=1).",
    )
    allow_window_loss: bool = Field(
        default=False,
        description="Explicit override: vacuum even if a consumer loses its replay window. "
        "Destructive: refused unless the deployment permits it (CDF_ALLOW_DESTRUCTIVE=1).",
    )
    listing_parallelism: int | None = Field(
        default=None,
        ge=1,
        description="Tasks VACUUM lists files with (Spark's default 10,000 suits huge tables).",
    )


# Inferred once, when the module loads (see `SILVER_CONFIG_SCHEMA`).
MAINTENANCE_CONFIG_SCHEMA = MaintenanceConfig.to_config_schema().as_field()


def _numeric(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


MAINTENANCE_JOB = "maintenance_job"
MAINTENANCE_SCHEDULE = "maintenance_schedule"


def maintenance_run_config(table: dg.AssetKey | str, **config: object) -> dict[str, Any]:
    """The run config of a maintenance run of `table` (its asset key), with `config`'s other
    `MaintenanceConfig` fields."""
    name = table.to_user_string() if isinstance(table, dg.AssetKey) else table
    return {"ops": {"vacuum": {"config": {"table": name, **config}}}}


@dataclass(frozen=True)
class _Vacuumed:
    """A table a maintenance job vacuums: its asset key and location."""

    key: dg.AssetKey
    location: str


def _destructive_options(config: MaintenanceConfig) -> list[str]:
    """The destructive options `config` asks for (`retain_zero`, `allow_window_loss`)."""
    return [
        name
        for name, value in (
            ("retain_zero", config.retain_zero),
            ("allow_window_loss", config.allow_window_loss),
        )
        if value
    ]


def _decide(
    location: str, specs: list[PipelineSpec], config: MaintenanceConfig, control: ControlTable
) -> VacuumDecision:
    """The VACUUM decision for the table at `location` under the run's `config`."""
    return plan_vacuum(
        location,
        specs,
        policy=config.policy,
        buffer_hours=config.buffer_hours,
        max_retention_hours=config.max_retention_hours,
        recovery_buffer_hours=config.recovery_buffer_hours,
        retain_zero=config.retain_zero,
        allow_window_loss=config.allow_window_loss,
        control=control,
    )


# Quoted: `dg.RawMetadataValue` exists for type checkers only, and this module's annotations are
# evaluated (Dagster reads the op's).
def _decision_metadata(decision: VacuumDecision) -> "dict[str, dg.RawMetadataValue]":
    """The run's and the observation's metadata: the decision's figures, and with a
    destructive one what it destroys, whose windows it cuts and what permitted it."""
    figures = decision.as_metadata()
    metadata: dict[str, dg.RawMetadataValue] = {
        key: value for key, value in figures.items() if _numeric(value) or isinstance(value, str)
    }
    metadata["consumers"] = dg.MetadataValue.json(figures["consumers"])
    destructive = decision.destroyed is not None
    metadata["destructive"] = destructive
    if destructive:
        metadata["destroyed"] = str(decision.destroyed)
        metadata["windows_cut"] = dg.MetadataValue.json(decision.windows_cut)
        metadata["permitted_by"] = PERMITTED_BY
    return metadata


def _vacuum_op(
    tables: Mapping[str, _Vacuumed], specs: list[PipelineSpec], allow_destructive: bool
) -> dg.OpDefinition:
    """The VACUUM op of `maintenance_job`, vacuuming the table its config names among `tables`
    (by asset key); `retain_zero` and `allow_window_loss` refused unless `allow_destructive`."""

    @dg.op(name="vacuum", tags={"kind": "delta"}, config_schema=MAINTENANCE_CONFIG_SCHEMA)
    def vacuum(
        context: dg.OpExecutionContext, spark: SparkResource, lake: LakeLayout
    ) -> dg.Output[None]:
        config = MaintenanceConfig(**context.op_config)
        table = tables.get(config.table)
        if table is None:
            unknown = InvalidRunConfig(
                f"`table: {config.table}` is not a table this deployment maintains; nothing "
                "was done",
                action=f"set `table` to one of {', '.join(sorted(tables)) or '(none)'}",
            )
            raise platform_failure(unknown)
        if context.run.tags.get(TABLE_TAG) != config.table:  # launched by hand: tag it
            context.instance.add_run_tags(context.run_id, {TABLE_TAG: config.table})
        control = lake.control()
        refuse_unless_permitted(
            allow_destructive,
            _destructive_options(config),
            control=control,
            context=context,
            table=table.location,
            action="vacuum",
        )
        decision = _decide(table.location, specs, config, control)
        metadata = _decision_metadata(decision)
        destructive = decision.destroyed is not None
        context.log.info("%s: %s", decision.action.value, decision.reason)
        log_row = {
            "table_location": table.location,
            "action": decision.action.value,
            "reason": decision.reason,
            "latest_version": decision.latest_version,
        }
        if not decision.will_vacuum:
            context.log_event(dg.AssetObservation(asset_key=table.key, metadata=metadata))
            record(control, context, **log_row, outcome="refused", destructive=False)
            refused = VacuumRefused(decision.reason, table=table.location)
            raise platform_failure(refused, **metadata)
        if destructive:
            context.log.warning("%s destroys %s", table.location, decision.destroyed)
        try:
            outcome = execute_vacuum(
                spark.session_on(control.storage),
                decision,
                storage=control.storage,
                listing_parallelism=config.listing_parallelism,
            )
        except Exception:
            record(control, context, **log_row, outcome="failed", destructive=destructive)
            raise
        if outcome.files_deleted is not None:
            metadata["files_deleted"] = outcome.files_deleted
        record(
            control,
            context,
            **log_row,
            outcome="vacuumed",
            destructive=destructive,
            permitted_by=PERMITTED_BY if destructive else None,
            destroyed=decision.destroyed,
            windows_cut=json.dumps(decision.windows_cut),
            files_deleted=outcome.files_deleted,
        )
        context.log_event(dg.AssetObservation(asset_key=table.key, metadata=metadata))
        return dg.Output(None, metadata=metadata)

    return vacuum


def build_maintenance_job(
    specs: list[PipelineSpec],
    consumed: Collection[dg.AssetKey] = (),
    *,
    allow_destructive: bool = False,
) -> tuple[dg.JobDefinition, list[str]]:
    """`maintenance_job` over every bronze table the pipelines read and every silver table among
    the asset keys `consumed` (read by consumer assets), and those tables' asset keys, as its
    run config names them; `retain_zero` and `allow_window_loss` are refused unless
    `allow_destructive`."""
    tables: dict[str, _Vacuumed] = {}
    for spec in sorted(specs, key=lambda s: s.bronze_name):
        key = dg.AssetKey([BRONZE_PREFIX, spec.bronze_name])
        tables.setdefault(key.to_user_string(), _Vacuumed(key, spec.source))
    for spec in specs:
        if silver_key(spec.id) in consumed:
            tables[silver_key(spec.id).to_user_string()] = _Vacuumed(
                silver_key(spec.id), spec.target
            )
    op = _vacuum_op(tables, specs, allow_destructive)

    @dg.job(
        name=MAINTENANCE_JOB,
        description="Consumer-aware VACUUM of one table (run config `table`: its asset key): "
        "raises the retention its consumers need or refuses, never silently cutting a replay "
        "window.",
    )
    def _job() -> None:
        op()

    return _job, list(tables)


def build_maintenance_schedule(job: dg.JobDefinition, tables: list[str]) -> dg.ScheduleDefinition:
    """`maintenance_schedule`: nightly, one run of `job` per table of `tables` (asset keys),
    each run keyed by its table and night; stopped until an operator turns it on."""

    @dg.schedule(
        name=MAINTENANCE_SCHEDULE,
        job=job,
        cron_schedule="0 3 * * *",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Nightly consumer-aware VACUUM: one maintenance_job run per table.",
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        night = context.scheduled_execution_time.date().isoformat()
        return [
            dg.RunRequest(
                run_key=f"{table}:{night}",
                run_config=maintenance_run_config(table),
                tags={TABLE_TAG: table},
            )
            for table in tables
        ]

    return _schedule
