"""The incremental sensor's run decisions on plain values, without Dagster or a JVM: which runs
share a run and how they spread over the instance's silver slots, which pipelines are left out
(and why) or asked again after a dead run, which runs count as pending, when a refresh is due,
and how many silver runs a run queue's limits allow at once."""

from __future__ import annotations

import pytest

from cdf_platform.core.config import default_pipelines_per_run
from cdf_platform.core.errors import RuntimeEnvironmentError
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.run_requests import (
    RunFate,
    SilverRun,
    WantedRun,
    parse_requested,
    pending_runs,
    queue_full,
    refresh_due,
    run_fate,
    run_requests,
    run_slots,
)
from cdf_platform_testkit.lake import orders_pipeline


def _spec(pipeline_id: str) -> PipelineSpec:
    return PipelineSpec(**orders_pipeline(pipeline_id))


def test_shared_runs_hold_at_most_the_configured_number_of_pipelines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wanted = [WantedRun(_spec(i), "incremental", "4", shares=True) for i in ("a", "b", "c")]
    wanted.append(WantedRun(_spec("big"), "incremental", "9"))
    planned, left_out = run_requests(wanted, {}, max_pipelines_per_run=2)
    assert [list(r.pipeline_ids) for r in planned] == [["big"], ["a", "b"], ["c"]]
    assert not left_out

    # As few runs as the limit per run allows, the pipelines spread evenly (3 and 2, not 4 and
    # 1).
    five = [WantedRun(_spec(i), "incremental", "4", shares=True) for i in "abcde"]
    planned, _ = run_requests(five, {}, max_pipelines_per_run=4)
    assert [list(r.pipeline_ids) for r in planned] == [["a", "b", "c"], ["d", "e"]]
    # The silver queue full: the shared pipelines wait for it to move (and say so); a pipeline
    # with a run of its own goes in the queue whatever its length.
    planned, left_out = run_requests(wanted, {}, max_pipelines_per_run=2, queue_full=True)
    assert [list(r.pipeline_ids) for r in planned] == [["big"]]
    assert [pipeline_id for pipeline_id, _ in left_out] == ["a", "b", "c"]
    assert all("every silver slot is busy" in why for _, why in left_out)

    monkeypatch.setenv("CDF_PIPELINES_PER_RUN", "1")
    assert default_pipelines_per_run() == 1
    monkeypatch.setenv("CDF_PIPELINES_PER_RUN", "0")
    with pytest.raises(RuntimeEnvironmentError, match="CDF_PIPELINES_PER_RUN='0'"):
        default_pipelines_per_run()


def test_run_keys_name_what_is_asked_a_dead_run_and_a_repairs_place_in_the_queue() -> None:
    alone = WantedRun(_spec("a"), "incremental", "7")
    repair = WantedRun(_spec("r"), "repair", "3:9")
    shared = [WantedRun(_spec(i), "refresh", "2:5", shares=True) for i in ("b", "c")]
    dead = SilverRun("deadbeef-0001", frozenset({"a"}), RunFate.DIED, {"a": "incremental:7"})
    planned, _ = run_requests([alone, repair, *shared], {"a": dead}, max_pipelines_per_run=10)
    by_key = {run.run_key: run for run in planned}
    # A dead run's request is made again under another key (Dagster drops a used one).
    run_a = by_key["incremental:a:7:after:deadbeef"]
    assert (run_a.pipeline_id, run_a.requested, run_a.first_in_queue) == (
        "a",
        "a=incremental:7",
        False,
    )
    assert by_key["repair:r:3:9"].first_in_queue
    (batch,) = [run for run in planned if run.run_key.startswith("batch:")]
    assert (batch.pipeline_ids, batch.pipeline_id) == (("b", "c"), None)
    assert parse_requested(batch.requested) == {"b": "refresh:2:5", "c": "refresh:2:5"}


def test_a_run_that_failed_in_its_code_is_not_asked_the_same_thing_again() -> None:
    wanted = [WantedRun(_spec("c"), "incremental", "1"), WantedRun(_spec("d"), "incremental", "2")]
    failed = {
        "c": SilverRun(
            "0123456789", frozenset({"c"}), RunFate.FAILED_IN_ITS_CODE, {"c": "incremental:1"}
        ),
        # Asked something else before: asked again.
        "d": SilverRun(
            "9876543210", frozenset({"d"}), RunFate.FAILED_IN_ITS_CODE, {"d": "incremental:1"}
        ),
    }
    planned, left_out = run_requests(wanted, failed, max_pipelines_per_run=10)
    assert left_out == [("c", "run 01234567 failed at 1")]
    assert [run.run_key for run in planned] == ["incremental:d:2"]


def test_how_a_run_ended_and_which_runs_are_pending() -> None:
    def fate(failed: bool, reason: str | None, retryable: bool, canceled: bool = False) -> RunFate:
        return run_fate(
            failed=failed, canceled=canceled, failure_reason=reason, marked_retryable=retryable
        )

    assert fate(True, "STEP_FAILURE", False) is RunFate.FAILED_IN_ITS_CODE
    assert fate(True, "JOB_INITIALIZATION_FAILURE", False) is RunFate.FAILED_IN_ITS_CODE
    assert fate(True, "STEP_FAILURE", True) is RunFate.DIED  # marked retryable by its step
    assert fate(True, "RUN_WORKER_CRASH", False) is RunFate.DIED
    assert fate(False, None, False, canceled=True) is RunFate.DIED
    assert fate(False, None, False) is RunFate.OTHER

    runs = [
        SilverRun("queued", frozenset({"a"})),
        SilverRun("retried", frozenset({"b"}), retried=True),  # its retry is the pending run
        SilverRun("retry", frozenset({"a", "b"})),
    ]
    assert pending_runs(runs) == {"a": "queued", "b": "retry"}


def test_refresh_is_due_at_half_the_freshness_window() -> None:
    spec = PipelineSpec(id="o", source="b", target="s", keys=["k"], max_allowed_lag_hours=2)
    hour = 3600.0
    assert refresh_due(spec, None, 10 * hour) == 10
    assert refresh_due(spec, 9.5 * hour, 10 * hour) is None
    assert refresh_due(spec, 9 * hour, 10 * hour) == 10


@pytest.mark.parametrize(
    ("slots", "in_flight", "full"),
    [
        (None, 9, False),  # no limit
        (4, 0, False),
        (4, 3, False),  # a slot free
        (4, 4, False),  # every slot taken (or about to be): one more run may wait
        (4, 5, True),  # one waits behind busy slots already
        (4, 6, True),
    ],
)
def test_the_silver_queue_is_full_when_a_run_waits_behind_busy_slots(
    slots: int | None, in_flight: int, full: bool
) -> None:
    assert queue_full(slots, in_flight) is full


@pytest.mark.parametrize(
    ("all_runs", "rules", "slots"),
    [
        (-1, [], None),  # no limit at all
        (5, [], 5),  # all runs' limit
        (5, [{"key": "q", "value": "silver", "limit": 4}], 4),  # deploy/dagster.yaml's
        (5, [{"key": "q", "limit": 3}], 3),  # the tag's, whatever its value
        (5, [{"key": "q", "value": {"applyLimitPerUniqueValue": True}, "limit": 2}], 2),
        (5, [{"key": "q", "value": "checks", "limit": 1}], 5),  # not silver's
        (-1, [{"key": "other", "limit": 1}], None),
    ],
)
def test_silver_run_slots_are_the_lowest_limit_that_applies(
    all_runs: int, rules: list[dict[str, object]], slots: int | None
) -> None:
    assert run_slots(all_runs, rules, tag="q", value="silver") == slots
