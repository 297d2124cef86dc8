"""The run worker's tag on a run: kept by the instance where the launcher adds it, read back by
the launcher (its earlier key too, for runs launched before the key moved), and left out of the
tags Dagster's GraphQL API gives the UI, so the runs list shows the incident tag instead."""

from __future__ import annotations

import json

import dagster as dg
from dagster_graphql.schema.pipelines.pipeline import GrapheneRun

from cdf_platform.orchestration.run_launcher import (
    LEGACY_RUN_WORKER_TAG,
    RUN_WORKER_TAG,
    _process,
)
from cdf_platform.orchestration.shared.keys import INCIDENT_TAG

PROCESS = {"worker": "127.0.0.1:4010", "pid": 4242, "started": 1.5, "host": "here"}


@dg.op
def _noop() -> None:
    pass


@dg.job
def _one_op_job() -> None:
    _noop()


def _ui_tags(instance: dg.DagsterInstance, run_id: str) -> dict[str, str]:
    """The run's tags as the UI's GraphQL API returns them."""
    (record,) = instance.get_run_records(dg.RunsFilter(run_ids=[run_id]))
    # The resolver does not read its GraphQL info argument.
    tags = GrapheneRun(record).resolve_tags(None)  # type: ignore[arg-type]
    return {tag.key: tag.value for tag in tags}


def test_the_run_workers_tag_is_kept_and_read_but_hidden_from_the_ui() -> None:
    with dg.instance_for_test() as instance:
        ran = _one_op_job.execute_in_process(
            instance=instance, tags={INCIDENT_TAG: "WATERMARK_OUTSIDE_RETENTION"}
        )
        instance.add_run_tags(ran.run_id, {RUN_WORKER_TAG: json.dumps(PROCESS)})
        run = instance.get_run_by_id(ran.run_id)
        assert run is not None
        assert _process(run) == PROCESS
        shown = _ui_tags(instance, ran.run_id)
        assert RUN_WORKER_TAG not in shown
        assert shown[INCIDENT_TAG] == "WATERMARK_OUTSIDE_RETENTION"


def test_a_run_tagged_before_the_key_moved_is_still_read() -> None:
    with dg.instance_for_test() as instance:
        ran = _one_op_job.execute_in_process(instance=instance)
        instance.add_run_tags(ran.run_id, {LEGACY_RUN_WORKER_TAG: json.dumps(PROCESS)})
        run = instance.get_run_by_id(ran.run_id)
        assert run is not None and _process(run) == PROCESS
