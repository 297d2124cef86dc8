"""What the demo's story reads back from the Dagster instance and its runs: a materialization's
metadata, a check's latest evaluation, and how a maintenance run was refused.

Example:
    >>> passed, figures = check_figures(instance, key, "replay_window")  # doctest: +SKIP
    >>> passed, figures["state"]  # doctest: +SKIP
    (False, 'LOST')
"""

from collections.abc import Iterable
from typing import Any

import dagster as dg

from cdf_platform.core.errors import DestructiveActionNotPermitted, VacuumRefused
from cdf_platform.demo.deployment import RunResult
from cdf_platform.demo.story.steps import DemoFailed
from cdf_platform.orchestration.shared.keys import INCIDENT_TAG

# How a maintenance run ended when it did not: the deployment refused its destructive run
# config, or the VACUUM guard refused it (a consumer is behind).
NOT_PERMITTED = "not permitted"
REFUSED = "refused"


def refusal(result: RunResult) -> str:
    """How a failed maintenance run was refused: `not permitted` (the deployment refuses the
    destructive run config), `refused` (the VACUUM guard), or the failure's own message."""
    for code, message in result.failures():
        if code == DestructiveActionNotPermitted.incident_code:
            return NOT_PERMITTED
        if code == VacuumRefused.incident_code:
            return REFUSED
        return f"failed: {message or code}"
    return "failed"


def tag_incident(instance: dg.DagsterInstance, run_id: str, codes: Iterable[Any]) -> None:
    """Tag a run of the story that failed as intended with the incident codes that failed it
    (`INCIDENT_TAG`, the key a rebuild's run carries for the loss it repairs), so the runs list
    says why it is red; nothing when no code is known."""
    found = sorted({str(code) for code in codes if code})
    if found:
        instance.add_run_tags(run_id, {INCIDENT_TAG: ", ".join(found)})


def latest_metadata(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, Any]:
    """The metadata values of `key`'s latest materialization ({} if none)."""
    event = instance.get_latest_materialization_event(key)
    if event is None or event.asset_materialization is None:
        return {}
    return {k: v.value for k, v in event.asset_materialization.metadata.items()}


def check_figures(
    instance: dg.DagsterInstance, key: dg.AssetKey, check: str
) -> tuple[bool, dict[str, Any]]:
    """Whether the latest evaluation of `check` on `key` passed, and its metadata values.

    Raises:
        DemoFailed: the check was never evaluated.
    """
    record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, check))
    if record is None or record.evaluation is None:
        raise DemoFailed(f"no evaluation of {check} on {key.to_user_string()}")
    evaluation = record.evaluation
    return evaluation.passed, {k: v.value for k, v in evaluation.metadata.items()}
