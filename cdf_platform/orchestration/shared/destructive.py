"""Destructive actions a run config can ask for, gated by a permission of the deployment.

Dagster OSS has no login: whoever reaches the UI can launch any job with any run config. A few
run configs destroy history every consumer may still need or skip a guard a person should
decide on: a maintenance run's `retain_zero` or `allow_window_loss`, a rebuild's
`override_fail_fast`. They run only where the definitions were built with `allow_destructive`
(`platform_defs`; `$CDF_ALLOW_DESTRUCTIVE` in the environment of the code server and the run
worker, off by default), whatever the run config says: a run config is not a permission. A run
refused so fails with `DestructiveActionNotPermitted` before it does anything; every
maintenance action, refused or done, is a row of the maintenance log (`ControlTable.
append_maintenance`: run, job, tags, what it destroyed), and the run's metadata says the same.
`cdf-platform` at a shell needs no permission: a person typed the command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg

from cdf_platform.core.config import ALLOW_DESTRUCTIVE_ENV
from cdf_platform.core.errors import DestructiveActionNotPermitted
from cdf_platform.orchestration.shared.keys import DESTRUCTIVE_TAG
from cdf_platform.orchestration.shared.step_failures import platform_failure
from cdf_platform.state.control import ControlTable

# The maintenance log's `permitted_by` for an action the deployment's permission let run.
PERMITTED_BY = f"{ALLOW_DESTRUCTIVE_ENV}=1"
NOT_PERMITTED = "not_permitted"


def run_facts(context: dg.OpExecutionContext) -> dict[str, Any]:
    """Who asked: the run's id, its job and its tags (as JSON), for the maintenance log."""
    return {
        "run_id": context.run_id,
        "job": context.job_name,
        "tags": json.dumps(dict(context.run.tags), sort_keys=True),
    }


def record(control: ControlTable, context: dg.OpExecutionContext, **row: Any) -> None:
    """Append a maintenance-log row for this run (`MAINTENANCE_SCHEMA`'s columns in `row`)."""
    control.append_maintenance({**run_facts(context), **row})


def refuse_unless_permitted(
    allowed: bool,
    requested: Sequence[str],
    *,
    control: ControlTable,
    context: dg.OpExecutionContext,
    table: str,
    action: str,
    pipeline_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> None:
    """Nothing when the run config asks for no destructive setting (`requested`: the names of
    those it sets); when the deployment permits them, tag the run with them
    (`DESTRUCTIVE_TAG`, which the alert sensor tells of); else record the refusal and fail the
    step.

    Raises:
        dagster.Failure: `DestructiveActionNotPermitted`, with the settings asked for.
    """
    if not requested:
        return
    if allowed:
        context.instance.add_run_tags(context.run_id, {DESTRUCTIVE_TAG: ", ".join(requested)})
        return
    asked = " and ".join(f"`{name}: true`" for name in requested)
    refused = DestructiveActionNotPermitted(
        f"the run config sets {asked}, which can destroy history or skip a guard, and this "
        f"deployment does not permit that ({ALLOW_DESTRUCTIVE_ENV} is not set in the code "
        "server's environment); nothing was done",
        pipeline_id=pipeline_id,
        table=table,
    )
    record(
        control,
        context,
        table_location=table,
        action=action,
        outcome=NOT_PERMITTED,
        destructive=True,
        reason=str(refused),
    )
    raise platform_failure(refused, **(metadata or {}), refused_settings=", ".join(requested))
