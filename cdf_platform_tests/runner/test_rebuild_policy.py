"""What a requested rebuild does, decided for every entry alike, without a JVM: a FAIL_FAST
pipeline's is refused unless the entry carries a person's decision, and audited when it
overrides; a SNAPSHOT_REBUILD pipeline's runs unaudited; one asked to repair a loss repaired
already does not run. (The same row from `cdf-platform rebuild` and from the rebuild job:
`cdf_platform_tests/test_cli.py`.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from cdf_platform.core.errors import RebuildNeedsOverride
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.plan import RunPlan, plan_pipeline
from cdf_platform.run.rebuild_policy import (
    AT_SHELL,
    OVERRIDE_ACTION,
    RunEntry,
    requested_rebuild,
)
from cdf_platform.state.control import ControlTable
from cdf_platform_testkit.lake import orders_pipeline
from cdf_platform_testkit.orders_bronze import write_orders_batch

LOG = logging.getLogger(__name__)


def _planned(lake: Path, fallback_mode: str) -> tuple[RunPlan, ControlTable]:
    spec = PipelineSpec(**orders_pipeline("strict", fallback_mode=fallback_mode)).resolved(
        str(lake)
    )
    write_orders_batch(spec.source, batch_size=5)
    control = ControlTable(str(lake / "_control"))
    return plan_pipeline(spec, control), control


def test_a_fail_fast_rebuild_without_a_persons_decision_is_refused_and_writes_nothing(
    tmp_path: Path,
) -> None:
    plan, control = _planned(tmp_path, "FAIL_FAST")
    refused_entry = RunEntry(job="rebuild_job", run_id="r1")
    with pytest.raises(RebuildNeedsOverride, match="FAIL_FAST: a rebuild needs a person"):
        requested_rebuild(
            refused_entry, control, plan.spec.target, plan, run_id="own", repair_of=None, log=LOG
        )
    assert control.read_maintenance_log() == []


def test_an_overriding_rebuild_writes_its_audit_record_whoever_asks(tmp_path: Path) -> None:
    plan, control = _planned(tmp_path, "FAIL_FAST")
    job = RunEntry(job="rebuild_job", run_id="dagster-run", tags={"u": "op"}, override="PERMIT")
    for entry in (RunEntry.at_shell("rebuild"), job):
        decided = requested_rebuild(
            entry, control, plan.spec.target, plan, run_id="own-run", repair_of=None, log=LOG
        )
        assert (decided.runs, decided.overridden_by) == (True, entry.override)
    at_shell, by_job = control.read_maintenance_log()
    who = ("run_id", "job", "tags", "permitted_by", "recorded_at")
    assert {k: v for k, v in at_shell.items() if k not in who} == {
        k: v for k, v in by_job.items() if k not in who
    }
    assert at_shell["action"] == OVERRIDE_ACTION
    assert (at_shell["outcome"], at_shell["destructive"]) == ("started", True)
    assert at_shell["latest_version"] == plan.end_version
    assert at_shell["reason"] == (
        "rebuild of FAIL_FAST pipeline strict with override_fail_fast; incident: none found by "
        "the plan"
    )
    assert (at_shell["run_id"], at_shell["job"], at_shell["tags"], at_shell["permitted_by"]) == (
        "own-run",
        "cdf-platform rebuild",
        "{}",
        AT_SHELL,
    )
    assert (by_job["run_id"], by_job["job"], by_job["permitted_by"]) == (
        "dagster-run",
        "rebuild_job",
        "PERMIT",
    )
    assert json.loads(by_job["tags"]) == {"u": "op"}


def test_a_snapshot_rebuild_pipelines_rebuild_runs_unaudited_and_a_repaired_loss_is_not_rebuilt(
    tmp_path: Path,
) -> None:
    plan, control = _planned(tmp_path, "SNAPSHOT_REBUILD")
    anyone = RunEntry(job="rebuild_job")
    decided = requested_rebuild(
        anyone, control, plan.spec.target, plan, run_id="own", repair_of=None, log=LOG
    )
    assert (decided.runs, decided.overridden_by) == (True, None)
    # Asked to repair the loss at watermark 3, silver's watermark has moved since (here: never
    # set) and the plan meets no problem: repaired already, no rebuild.
    repaired = requested_rebuild(
        anyone, control, plan.spec.target, plan, run_id="own", repair_of=3, log=LOG
    )
    assert not repaired.runs
    assert control.read_maintenance_log() == []
