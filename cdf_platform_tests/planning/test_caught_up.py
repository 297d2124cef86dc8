"""A caught-up pipeline's decision is kept between the incremental sensor's ticks while
bronze's and silver's logs list the same and its control row reads the same, for at most
`REASSESS_AFTER_S`; a commit to either table, or another row, is seen at the next tick."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import dagster as dg

from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.planning.assessment import ControlReads
from cdf_platform.planning.caught_up import REASSESS_AFTER_S, CaughtUpMemo
from cdf_platform.planning.run_requests import CaughtUp, HeldBack, WantedRun, wanted_run
from cdf_platform_tests.lake_platform import ORDERS, bronze_batch, lake_defs, materialize

LOG = logging.getLogger(__name__)


def _commit(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version:020d}.json"


def test_a_caught_up_decision_is_kept_while_both_logs_list_the_same(
    spark_resource: SparkResource, lake: Path
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    instance = dg.DagsterInstance.ephemeral()
    bronze_batch(defs, "orders", instance, 10)  # version 1
    materialize(defs, silver_key("orders"), instance=instance)
    layout = defs.resources["lake"]
    assert isinstance(layout, LakeLayout)
    spec, control = layout.spec("orders"), layout.control()
    reads = ControlReads.of(control, verified=False)
    now = [0.0]
    memo = CaughtUpMemo(clock=lambda: now[0])

    def decided(with_reads: ControlReads = reads) -> object:
        return memo.wanted_run(spec, control, with_reads, LOG)

    assert decided() == CaughtUp(1)
    assert memo.kept == 1

    # Bronze's latest commit made unreadable, its name and modification time kept: a fresh
    # assessment cannot read it, the kept decision does not read it.
    commit = _commit(lake / "bronze" / "orders", 1)
    written, stat = commit.read_bytes(), commit.stat()
    commit.write_bytes(b"{not json")
    os.utime(commit, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert isinstance(wanted_run(spec, control, reads, LOG), HeldBack)
    now[0] = REASSESS_AFTER_S - 1
    assert decided() == CaughtUp(1)
    # Another control row for the pipeline: assessed again.
    state = {**reads.states["orders"], "source_table_id": "another"}
    other_row = replace(reads, states={**reads.states, "orders": state})
    assert isinstance(decided(other_row), HeldBack)
    assert memo.kept == 0
    commit.write_bytes(written)
    os.utime(commit, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert decided() == CaughtUp(1)
    # A kept decision `REASSESS_AFTER_S` old is taken again.
    commit.write_bytes(b"{not json")
    os.utime(commit, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    now[0] += REASSESS_AFTER_S
    assert isinstance(decided(), HeldBack)
    commit.write_bytes(written)
    os.utime(commit, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert decided() == CaughtUp(1)

    # A bronze commit is seen at the next tick; silver's commit that applies it, too.
    bronze_batch(defs, "orders", instance, 10)  # version 2
    behind = decided()
    assert isinstance(behind, WantedRun)
    assert behind.requested == "incremental:2"
    assert decided() == behind
    materialize(defs, silver_key("orders"), instance=instance)
    assert decided() == CaughtUp(2)
    assert memo.kept == 1
    # Silver gone (its log listed empty): a first load is wanted at once.
    shutil.rmtree(lake / "silver" / "orders")
    reloaded = decided()
    assert isinstance(reloaded, WantedRun)
    assert reloaded.requested == "incremental:2"
    assert memo.kept == 0
