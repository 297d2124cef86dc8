"""The end-to-end demo: the outage story, driven through the real Dagster definitions.

Seed bronze, run silver and gold incrementally, pause the consumer while bronze moves on, let
maintenance destroy the replay window (the platform refuses first; an operator then forces it),
watch the `replay_window` check fail, let the rebuild sensor launch the rebuild, verify silver
against the pinned bronze snapshot, resume incremental runs and verify silver again. Every step
is a real Dagster run on a real instance (SQLite under `<workdir>/dagster_home`), so the UI shows
the same story. The event log (`bronze/accounts_cdc`, `changes: events`) goes through every step
with the row tables; its silver is verified against the fold of the bronze events instead of a
snapshot of rows.
"""

import itertools
import logging
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from cdf_platform.core.errors import DestructiveActionNotPermitted, VacuumRefused
from cdf_platform.core.spec import ChangeSource
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.demo.bronze_assets import DEMO_TABLES
from cdf_platform.demo.events import folded_rows
from cdf_platform.demo.gold_asset import CUSTOMER_ORDER_TOTALS_KEY
from cdf_platform.orchestration.checks import REPLAY_WINDOW
from cdf_platform.orchestration.keys import RUN_KEY_TAG, SENSOR_NAME_TAG
from cdf_platform.planning.status import pipeline_status

logger = logging.getLogger(__name__)

DEMO_DIR = ".demo"
DEMO_INSTANCE_YAML = """\
# The demo's instance (`cdf-platform demo` writes it; the demo folder is wiped on each run).
concurrency:
  pools:
    granularity: run
    default_limit: 1
telemetry:
  enabled: false
"""


@dataclass
class Step:
    """One step of the story and the figures it produced."""

    name: str
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


def sensor_run_tags(sensor_name: str, request: dg.RunRequest) -> dict[str, str]:
    """The tags of a run launched as the daemon launches a sensor's request: the request's own,
    the sensor's name and the run key, so the run's page in the UI names the sensor."""
    return {
        **(request.tags or {}),
        SENSOR_NAME_TAG: sensor_name,
        RUN_KEY_TAG: str(request.run_key),
    }


class DemoFailed(RuntimeError):
    """A step of the demo did not end as the story says it must."""


def _say(text: str) -> None:
    logger.info("%s", text)


def _data_columns(path: str) -> list[str]:
    """The table's columns that are not the platform's bookkeeping (`_...`)."""
    fields = open_delta_table(path).schema().fields
    return [f.name for f in fields if not f.name.startswith("_")]


def _rows(
    path: str, columns: list[str], *, version: int | None = None, live_only: bool = False
) -> Counter[tuple[Any, ...]]:
    """The rows of the Delta table at `path` (at `version`) as a multiset of `columns`;
    `live_only` leaves out soft-deleted rows. Read by deltalake, no JVM."""
    from deltalake import QueryBuilder

    table = open_delta_table(path, version=version)
    soft_deletes = "_is_deleted" in {f.name for f in table.schema().fields}
    selected = ", ".join(f'"{column}"' for column in columns)
    where = ' WHERE NOT "_is_deleted"' if live_only and soft_deletes else ""
    result = QueryBuilder().register("t", table).execute(f"SELECT {selected} FROM t{where}")
    values = [column.to_pylist() for column in result.read_all().columns]
    return Counter(zip(*values, strict=True))


def _metadata(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> dict[str, Any]:
    events = result.asset_materializations_for_node(key.to_python_identifier())
    return {k: v.value for k, v in events[-1].metadata.items()} if events else {}


# Check evaluations while the consumer is paused, and the least time between them: 0.01 h, so
# that each plots less headroom than the one before at 2 decimals.
HEADROOM_EVALUATIONS = 3
HEADROOM_STEP_SECONDS = 37.0
NOT_PERMITTED = "not permitted"
REFUSED = "refused"


def _refusal(result: dg.ExecuteInProcessResult) -> str:
    """How a failed maintenance run was refused: `not permitted` (the deployment refuses the
    destructive run config), `refused` (the VACUUM guard), or the failure's own message."""
    for event in result.all_events:
        failure = event.step_failure_data if event.is_step_failure else None
        if failure is None or failure.user_failure_data is None:
            continue
        code = failure.user_failure_data.metadata.get("incident_code")
        value = getattr(code, "value", code)
        if value == DestructiveActionNotPermitted.incident_code:
            return NOT_PERMITTED
        if value == VacuumRefused.incident_code:
            return REFUSED
        return f"failed: {failure.error.message if failure.error else value}"
    return "failed"


def _check_figures(
    instance: dg.DagsterInstance, key: dg.AssetKey, check: str
) -> tuple[bool, dict[str, Any]]:
    record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, check))
    if record is None or record.evaluation is None:
        raise DemoFailed(f"no evaluation of {check} on {key.to_user_string()}")
    evaluation = record.evaluation
    return evaluation.passed, {k: v.value for k, v in evaluation.metadata.items()}


class DemoStory:
    """The demo's state: work folder, Definitions, instance, and the steps run so far."""

    def __init__(
        self,
        workdir: Path,
        *,
        batch_size: int,
        retention_seconds: int,
        lake_root: str | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.batch_size = batch_size
        self.retention_seconds = retention_seconds
        self.steps: list[Step] = []
        # A clean start: the demo owns this folder (never the user's DAGSTER_HOME or lake).
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.home = self.workdir / "dagster_home"
        self.home.mkdir(parents=True)
        # The demo's own throwaway instance: one run per pipeline at a time (docs/production.md,
        # Configuration), and no first-use telemetry banner in the story's output.
        (self.home / "dagster.yaml").write_text(DEMO_INSTANCE_YAML, encoding="utf-8")
        self.spark_log = self.workdir / "spark.log"
        if lake_root is None:
            (self.workdir / "lake").mkdir()
        self.lake = lake_root or str(self.workdir / "lake")
        os.environ["DAGSTER_HOME"] = str(self.home)
        os.environ["CDF_LAKE_ROOT"] = self.lake
        from cdf_platform.demo.definitions import build_demo_defs
        from cdf_platform.orchestration.resources import LakeLayout, SparkResource

        self.layout = LakeLayout.from_environment().bound()
        self.layout.use_storage()
        self.control = self.layout.control()
        self.spark_resource = SparkResource.from_environment(
            shuffle_partitions=1,
            storage_locations=self.layout.storage_locations(),
            # Laptop-sized: Delta replays its log with 50 tasks and VACUUM lists files with
            # 10,000 by default, which is most of the time spent on tables this small.
            spark_config={
                "spark.databricks.delta.snapshotPartitions": "2",
                "spark.sql.sources.parallelPartitionDiscovery.parallelism": "4",
                "spark.default.parallelism": "4",
                "spark.sql.adaptive.enabled": "false",
            },
            # Ivy's resolution report and the JVM's warnings go to a file, not the story.
            jvm_log=str(self.spark_log),
        )
        # As a deployment's: destructive run configs refused until the operator's step.
        self.defs = build_demo_defs(self.layout, self.spark_resource, allow_destructive=False)
        self.instance = dg.DagsterInstance.get()
        self.specs = self.layout.specs()

    def step(self, name: str, action: Callable[[Step], None]) -> None:
        """Run one step, timing it and keeping its figures."""
        _say(f"==> {name}")
        current = Step(name)
        started = time.monotonic()
        action(current)
        current.seconds = time.monotonic() - started
        self.steps.append(current)
        shown = ", ".join(f"{k}={v}" for k, v in current.figures.items())
        _say(f"    done in {current.seconds:.1f} s: {shown}")

    def run_job(self, name: str, **kwargs: Any) -> dg.ExecuteInProcessResult:
        """Execute the definitions' job `name` on the demo instance.

        Run logs stay in the instance (the UI shows them); the console shows the story.
        """
        job = self.defs.resolve_job_def(name)
        run_config = kwargs.pop("run_config", None) or {}
        if isinstance(run_config, dg.RunConfig):
            run_config = run_config.to_config_dict()
        run_config = {**run_config, "loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
        return job.execute_in_process(instance=self.instance, run_config=run_config, **kwargs)

    def bronze_batch(self, current: Step) -> None:
        """One deterministic batch into every demo bronze table."""
        config = {"config": {"batch_size": self.batch_size}}
        result = self.run_job(
            "demo_bronze_job",
            run_config={"ops": {f"bronze__{table}": config for table in DEMO_TABLES}},
        )
        for table in DEMO_TABLES:
            figures = _metadata(result, dg.AssetKey(["bronze", table]))
            current.figures[f"bronze_{table}_version"] = figures.get("version")

    def silver_and_gold(self, current: Step) -> None:
        """incremental_job (silver + checks), then gold from silver's change feed (its mode)."""
        result = self.run_job("incremental_job")
        for spec in self.specs:
            figures = _metadata(result, dg.AssetKey(["silver", spec.id]))
            current.figures[f"{spec.id}_mode"] = figures.get("mode")
            current.figures[f"{spec.id}_rows"] = "+{}/~{}/-{}".format(
                figures.get("rows_inserted"),
                figures.get("rows_updated"),
                figures.get("rows_deleted"),
            )
            current.figures[f"{spec.id}_watermark"] = figures.get("watermark_after")
        gold = self.run_job("gold_job")
        current.figures["gold_ok"] = gold.success
        # full on the first run, then incremental: silver's rebuild is a MERGE, so its change
        # feed (gold's input) stays readable across the outage.
        current.figures["gold_mode"] = _metadata(gold, CUSTOMER_ORDER_TOTALS_KEY).get("mode")

    def checks(self, current: Step, *, expect_passed: bool) -> None:
        """checks_job; record each pipeline's replay_window figures."""
        self.run_job("checks_job", raise_on_error=False)
        for spec in self.specs:
            passed, figures = _check_figures(
                self.instance, dg.AssetKey(["silver", spec.id]), REPLAY_WINDOW
            )
            current.figures[f"{spec.id}_window"] = figures.get("state")
            # As plotted: a caught-up consumer's is the retention horizon, 0 once lost.
            headroom = figures.get("headroom_hours")
            current.figures[f"{spec.id}_headroom_h"] = "-" if headroom is None else headroom
            current.figures[f"{spec.id}_watermark"] = figures.get("watermark")
            current.figures[f"{spec.id}_latest"] = figures.get("latest_version")
            if passed is not expect_passed:
                raise DemoFailed(
                    f"{spec.id}: replay_window passed={passed}, expected {expect_passed}"
                )

    def set_retention(self, current: Step, value: str) -> None:
        """Set bronze's `delta.deletedFileRetentionDuration` on every demo table: the
        operator's ALTER TABLE, committed by deltalake (a property change needs no Spark)."""
        for spec in self.specs:
            open_delta_table(spec.source).alter.set_table_properties(
                {"delta.deletedFileRetentionDuration": value}
            )
        current.figures["deletedFileRetentionDuration"] = value

    def maintenance(self, current: Step, *, override: bool, expected: str) -> None:
        """VACUUM RETAIN 0 HOURS on every bronze table (`allow_window_loss` if `override`);
        its outcome must be `expected`: `not permitted` (the deployment refuses destructive run
        configs), `refused` (a consumer is behind) or `done`."""
        for spec in self.specs:
            name = f"maintenance_{spec.bronze_name}_job"
            config = {"retain_zero": True, "allow_window_loss": override, "listing_parallelism": 4}
            result = self.run_job(
                name,
                run_config={"ops": {f"vacuum_{spec.bronze_name}": {"config": config}}},
                raise_on_error=False,
            )
            outcome = "done" if result.success else _refusal(result)
            if outcome != expected:
                raise DemoFailed(f"{name}: {outcome}, expected {expected}")
            current.figures[f"{spec.bronze_name}_vacuum"] = outcome

    def permit_destructive(self, current: Step) -> None:
        """The operator's step: this deployment now permits destructive run configs, as
        `CDF_ALLOW_DESTRUCTIVE=1` in the code server's environment and a reload would."""
        from cdf_platform.demo.definitions import build_demo_defs

        _say(
            "    the operator permits destructive actions (as CDF_ALLOW_DESTRUCTIVE=1 in the "
            "code server's environment would); the demo's definitions are built again"
        )
        self.defs = build_demo_defs(self.layout, self.spark_resource, allow_destructive=True)
        current.figures["allow_destructive"] = True

    def rebuild_by_sensor(self, current: Step) -> None:
        """Tick the rebuild sensor, launch what it requests, tick again (nothing new)."""
        sensor = self.defs.resolve_sensor_def("rebuild_sensor")

        def tick(cursor: str | None) -> dg.SensorResult:
            with dg.build_sensor_context(
                instance=self.instance,
                cursor=cursor,
                definitions=self.defs,
            ) as context:
                result = sensor(context)
                assert isinstance(result, dg.SensorResult)
                return result

        first = tick(None)
        requests = list(first.run_requests or [])
        current.figures["first_tick_requests"] = len(requests)
        for request in requests:
            result = self.run_job(
                "rebuild_job",
                run_config=request.run_config,
                asset_selection=list(request.asset_selection or []),
                tags=sensor_run_tags(sensor.name, request),
            )
            for key in request.asset_selection or []:
                figures = _metadata(result, key)
                current.figures[f"{key.path[-1]}_rebuilt_at"] = figures.get("watermark_after")
                current.figures[f"{key.path[-1]}_incident"] = figures.get("incident_code")
        second = tick(first.cursor)
        current.figures["second_tick_requests"] = len(second.run_requests or [])
        if len(requests) != len(self.specs) or current.figures["second_tick_requests"]:
            raise DemoFailed(f"sensor requested {len(requests)} then {second.run_requests}")

    def headroom_runs_down(self, current: Step) -> None:
        """checks_job HEADROOM_EVALUATIONS times while the consumer is paused, each at least
        0.01 h (a plotted figure's 2 decimals) after the one before, so `headroom_hours` plots
        a shrinking series before the loss, as a week's retention would in days."""
        left = self.seconds_until_window_passes()
        spacing = max(HEADROOM_STEP_SECONDS, left / (HEADROOM_EVALUATIONS + 0.5))
        series: dict[str, list[float]] = {spec.id: [] for spec in self.specs}
        for n in range(HEADROOM_EVALUATIONS):
            if n:
                time.sleep(spacing)
            self.run_job("checks_job", raise_on_error=False)
            for spec in self.specs:
                _passed, figures = _check_figures(
                    self.instance, dg.AssetKey(["silver", spec.id]), REPLAY_WINDOW
                )
                series[spec.id].append(float(figures["headroom_hours"]))
        for pipeline_id, points in series.items():
            current.figures[f"{pipeline_id}_headroom_h"] = " > ".join(f"{p:.2f}" for p in points)
            shrinking = all(b < a for a, b in itertools.pairwise(points))
            if left >= HEADROOM_STEP_SECONDS * HEADROOM_EVALUATIONS and not shrinking:
                raise DemoFailed(f"{pipeline_id}: headroom did not shrink: {points}")

    def seconds_until_window_passes(self) -> float:
        """How long until every paused consumer's first unapplied change is older than the
        shortened retention (its lag, from the logs), plus a second."""
        lags = [pipeline_status(spec, self.control).lag_hours or 0.0 for spec in self.specs]
        return max(0.0, self.retention_seconds + 1 - min(lags) * 3600)

    def verify(self, current: Step) -> None:
        """Silver equals bronze at silver's watermark (live rows), compared row for row by a
        second engine (deltalake's), not the Spark that wrote silver: a row table's snapshot,
        or for the event log the fold of its events (per key the latest by `ts_ms`, absent if
        that is a delete)."""
        for spec in self.specs:
            watermark = pipeline_status(spec, self.control).watermark
            columns = _data_columns(spec.target)
            silver = _rows(spec.target, columns, live_only=True)
            if spec.changes is ChangeSource.EVENTS:
                bronze = folded_rows(spec.source, columns, version=watermark)
            else:
                bronze = _rows(spec.source, columns, version=watermark)
            diff = sum(((bronze - silver) + (silver - bronze)).values())
            current.figures[f"{spec.id}_rows"] = silver.total()
            current.figures[f"{spec.id}_differences"] = diff
            if diff:
                raise DemoFailed(f"{spec.id}: silver differs from bronze@{watermark} by {diff}")

    def run(self) -> None:
        """The whole story, on bronze tables that keep the demo's compression of a week of
        history (`retention_seconds`), so the headroom plot moves within minutes; back to 7
        days at the end, for the UI."""
        week = f"interval {self.retention_seconds} seconds"
        self.step("seed bronze", self.bronze_batch)
        self.step("bronze retention: the demo's week", lambda s: self.set_retention(s, week))
        self.step("initial silver load + gold", self.silver_and_gold)
        self.step("bronze batch 2", self.bronze_batch)
        self.step("incremental run", self.silver_and_gold)
        self.step("checks: windows healthy", lambda s: self.checks(s, expect_passed=True))
        for n in (3, 4):
            self.step(f"consumer paused; bronze batch {n}", self.bronze_batch)
        self.step(
            "maintenance forced from the UI: not permitted",
            lambda s: self.maintenance(s, override=True, expected=NOT_PERMITTED),
        )
        self.step("operator permits destructive actions", self.permit_destructive)
        self.step(
            "maintenance RETAIN 0: refused",
            lambda s: self.maintenance(s, override=False, expected=REFUSED),
        )
        self.step("checks while paused: headroom runs down", self.headroom_runs_down)
        wait = self.seconds_until_window_passes()
        _say(f"    waiting {wait:.1f} s: the paused consumer's first change leaves the window")
        time.sleep(wait)
        self.step(
            "maintenance forced by the operator",
            lambda s: self.maintenance(s, override=True, expected="done"),
        )
        self.step("checks: replay window LOST", lambda s: self.checks(s, expect_passed=False))
        self.step("rebuild sensor launches rebuild", self.rebuild_by_sensor)
        self.step("verify silver = bronze snapshot", self.verify)
        self.step("bronze batch 5", self.bronze_batch)
        self.step("incremental runs resume", self.silver_and_gold)
        self.step("verify silver = bronze again", self.verify)
        self.step("checks: windows healthy again", lambda s: self.checks(s, expect_passed=True))
        self.step(
            "bronze retention back to 7 days, for the UI",
            lambda s: self.set_retention(s, "interval 7 days"),
        )

    def summary(self) -> str:
        """The steps and their figures as a table."""
        width = max(len(s.name) for s in self.steps)
        lines = [f"{'step':<{width}}  {'seconds':>7}  figures", "-" * (width + 40)]
        for s in self.steps:
            figures = ", ".join(f"{k}={v}" for k, v in s.figures.items())
            lines.append(f"{s.name:<{width}}  {s.seconds:>7.1f}  {figures}")
        return "\n".join(lines)


def run_demo(
    *, workdir: Path, batch_size: int, retention_seconds: int, local_s3: bool = False
) -> int:
    """Run the story in `workdir` (wiped first); print the summary; return the exit code.

    With `local_s3`, the lake (bronze, silver, gold and the control tables) lives in a bucket
    of a local S3 server (moto) started for the story and stopped after it; the Dagster
    instance stays in `workdir`.
    """
    if not local_s3:
        return _tell(workdir, batch_size, retention_seconds, None)
    from cdf_platform.demo.local_s3 import LocalS3Server

    with LocalS3Server(bucket="demo-lake") as server:
        os.environ.update(server.env())
        _say(f"local S3 server on {server.endpoint}, lake s3://{server.bucket}/lake")
        return _tell(workdir, batch_size, retention_seconds, f"s3://{server.bucket}/lake")


def _tell(workdir: Path, batch_size: int, retention_seconds: int, lake_root: str | None) -> int:
    started = time.monotonic()
    story = DemoStory(
        workdir, batch_size=batch_size, retention_seconds=retention_seconds, lake_root=lake_root
    )
    try:
        story.run()
    except DemoFailed as err:
        logger.error("demo failed: %s\n%s", err, story.summary())
        return 1
    print(story.summary())  # noqa: T201 (the demo's report is its output)
    if lake_root is not None:
        print(f"\nDemo finished in {time.monotonic() - started:.0f} s on {lake_root}.")  # noqa: T201
        return 0
    print(  # noqa: T201
        f"\nDemo finished in {time.monotonic() - started:.0f} s. Browse the same runs, checks "
        "and plots in the Dagster UI:\n\n"
        f"  DAGSTER_HOME={story.home} CDF_LAKE_ROOT={story.lake} "
        ".venv/bin/dagster dev -w workspace.demo.yaml\n\n"
        "(or `make dev`), then open http://127.0.0.1:3000"
    )
    return 0
