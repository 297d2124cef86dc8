"""The gold consumer of the generated histories (`gold/totals_by_name`,
`cdf_platform_testkit.faults.gold_asset`), materialized with real Dagster after the history's
consumer runs and checked against the gold oracle (`cdf_platform_testkit.faults.gold_oracle`).

`GoldConsumer` drives it through one Dagster instance and one asset list per history: after
the first run, after the first rebuild (a lost window, a source reset, an operator's rebuild)
and at the end it materializes; after other runs it may skip (then its next batch spans
several silver runs), and the first time it catches up after a skip it VACUUMs silver with
zero retention first (then the batch must be full exactly when the vacuum removed a file the
range needs). After each
materialization: the batch's mode is the ground truth's, gold equals the oracle's totals, the
consumer's watermark (`read_consumer_marks`) is the silver version it read and rides in gold's
latest commit, the run counter went up by one, and silver was not written; a rerun with
nothing new commits nothing and leaves the watermark.

Example:
    >>> gold = GoldConsumer(spark_resource, lake, spec, seed=3)  # doctest: +SKIP
    >>> gold.after_run(rebuilt=False, live_rows=rows)  # doctest: +SKIP
    []
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from deltalake import DeltaTable

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.io_manager.watermark_io_manager import (
    RESOURCE_KEY,
    WatermarkIOManager,
)
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.state.consumer_marks import ConsumerMarks, read_consumer_marks
from cdf_platform_testkit.faults.gold_asset import GOLD_KEY, totals_by_name_asset
from cdf_platform_testkit.faults.gold_oracle import (
    expected_totals,
    gold_problems,
    silver_range_lost,
)
from cdf_platform_testkit.faults.oracle import read_rows
from cdf_platform_testkit.vacuum import vacuum_retain_zero

CONSUMER = GOLD_KEY.to_user_string()
NODE = GOLD_KEY.to_python_identifier()


@dataclass
class GoldReport:
    """Figures of one history's gold consumer."""

    runs: int = 0
    modes: Counter[str] = field(default_factory=Counter)
    skipped: int = 0
    vacuums: int = 0
    lost_by_vacuum: int = 0
    reruns: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {
            "runs": self.runs,
            "modes": dict(self.modes),
            "skipped": self.skipped,
            "vacuums": self.vacuums,
            "lost_by_vacuum": self.lost_by_vacuum,
            "reruns": self.reruns,
            "seconds": round(self.seconds, 2),
        }


def _table_version(path: str) -> int | None:
    return int(DeltaTable(path).version()) if DeltaTable.is_deltatable(path) else None


class GoldConsumer:
    """The gold consumer of one history: its Dagster instance, assets and resources (built
    once), its schedule (seeded) and its checks."""

    def __init__(
        self,
        spark_resource: SparkResource,
        lake: Path,
        spec: PipelineSpec,
        seed: int,
        *,
        skip: float = 0.7,
        vacuums: int = 1,
    ) -> None:
        self.silver = spec.target
        silver = silver_key(spec.id)
        self.input_id = silver.to_user_string()
        self.table = str(lake / "gold" / "totals_by_name")
        upstream = dg.AssetSpec(
            silver, metadata={"path": dg.MetadataValue.path(self.silver), "keys": "id"}
        ).with_io_manager_key(RESOURCE_KEY)
        self.assets: list[Any] = [upstream, totals_by_name_asset(silver)]
        layout = LakeLayout(lake_root=str(lake))
        self.spark = spark_resource
        self.resources = {RESOURCE_KEY: WatermarkIOManager(spark=spark_resource, lake=layout)}
        self.instance = dg.DagsterInstance.ephemeral()
        # Its own generator: the bronze history stays the seed's whether gold runs or not.
        self.rng = random.Random(seed * 7349 + 5)
        self.skip = skip
        self.vacuums = vacuums
        self._behind = False  # a run was skipped since the last materialization
        self._read_a_rebuild = False
        self.report = GoldReport()

    def after_run(self, *, rebuilt: bool, live_rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """After a consumer run (`rebuilt`: a rebuild) that left silver holding `live_rows`
        (the oracle's): materialize (always the first time, and after the first rebuild), or
        skip with probability `skip`; the problems found."""
        draw = self.rng.random()
        started = time.monotonic()
        try:
            must = not self.report.runs or (rebuilt and not self._read_a_rebuild)
            if not must and draw < self.skip:
                self.report.skipped += 1
                self._behind = True
                return []
            self._read_a_rebuild |= rebuilt
            return self._catch_up(live_rows)
        finally:
            self.report.seconds += time.monotonic() - started

    def finish(self, live_rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """At the end of the history: catch up if behind, then a rerun must find nothing new."""
        started = time.monotonic()
        try:
            problems = self._catch_up(live_rows) if self._behind else []
            return problems or self._materialize(live_rows, vacuum=False)
        finally:
            self.report.seconds += time.monotonic() - started

    def _catch_up(self, live_rows: Sequence[Mapping[str, Any]]) -> list[str]:
        """Materialize; the first `vacuums` times that gold skipped a run before, VACUUM silver
        first (its batch spans several silver runs, whose change files the VACUUM removes)."""
        vacuum = self._behind and self.report.vacuums < self.vacuums
        self._behind = False
        return self._materialize(live_rows, vacuum=vacuum)

    def _vacuum_silver(self) -> None:
        """VACUUM silver with zero retention: every file its latest version does not need goes,
        change-data files included. Spark's VACUUM, not delta-rs': delta-rs 1.6.6's full
        VACUUM deleted a deletion-vector file that silver's latest version still used (seen in
        history 9), so the snapshot itself could no longer be read."""
        vacuum_retain_zero(self.spark.spark_session, self.silver)
        self.report.vacuums += 1

    def _materialize(self, live_rows: Sequence[Mapping[str, Any]], *, vacuum: bool) -> list[str]:
        before = read_consumer_marks(self.table, CONSUMER)
        if vacuum:
            self._vacuum_silver()
        silver_version = _table_version(self.silver)
        assert silver_version is not None, "gold runs after silver exists"
        gold_before = _table_version(self.table)
        watermark = before.version_of(self.input_id) if before is not None else None
        lost = None
        if watermark is None:
            expected_mode = "full"
        elif watermark == silver_version:
            expected_mode = "nothing_new"
        else:
            lost = silver_range_lost(self.silver, watermark, silver_version)
            expected_mode = "full" if lost else "incremental"
        if lost and vacuum:
            self.report.lost_by_vacuum += 1
        result = dg.materialize(
            self.assets,
            selection=[GOLD_KEY],
            resources=self.resources,
            instance=self.instance,
            raise_on_error=False,
        )
        self.report.runs += 1
        if not result.success:
            failure = result.failure_data_for_node(NODE)
            return [f"gold run failed ({expected_mode} expected): {failure}"]
        (materialization,) = result.asset_materializations_for_node(NODE)
        metadata: dict[str, Any] = {
            k: getattr(v, "value", v) for k, v in materialization.metadata.items()
        }
        mode = str(metadata["mode"])
        self.report.modes[mode] += 1
        if mode == "nothing_new":
            self.report.reruns += 1
        problems = []
        if mode != expected_mode:
            problems.append(f"gold read {mode}, expected {expected_mode} ({lost or 'not lost'})")
        if _table_version(self.silver) != silver_version:
            problems.append("the gold run wrote to silver")
        after = read_consumer_marks(self.table, CONSUMER)
        problems += self._marks_problems(mode, before, after, gold_before, silver_version)
        problems += self._written_problems(metadata.get("written"), mode)
        columns, rows = read_rows(self.table)
        problems += gold_problems(columns, rows, expected_totals(live_rows))
        return [f"gold after silver {silver_version}: {p}" for p in problems]

    def _marks_problems(
        self,
        mode: str,
        before: ConsumerMarks | None,
        after: ConsumerMarks | None,
        gold_before: int | None,
        silver_version: int,
    ) -> list[str]:
        gold_after = _table_version(self.table)
        if mode == "nothing_new":
            if gold_after != gold_before or after != before:
                return [f"nothing new committed: gold {gold_before} -> {gold_after}, {after}"]
            return []
        if after is None:
            return ["no watermark after a write"]
        problems = []
        if after.version_of(self.input_id) != silver_version:
            problems.append(f"watermark {after.inputs}, silver read at {silver_version}")
        if after.inputs[self.input_id].table_id != DeltaTable(self.silver).metadata().id:
            problems.append("the watermark names another silver table id")
        if after.commit_version != gold_after:
            problems.append(f"watermark in gold commit {after.commit_version}, latest {gold_after}")
        if after.counter != (before.counter if before else 0) + 1:
            problems.append(f"run counter {before and before.counter} -> {after.counter}")
        return problems

    @staticmethod
    def _written_problems(written: object, mode: str) -> list[str]:
        if written is not (mode != "nothing_new"):
            return [f"a {mode} batch reported written={written}"]
        return []
