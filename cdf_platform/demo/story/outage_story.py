"""The end-to-end demo: the outage story, driven through the real Dagster definitions.

Seed bronze, run silver and gold incrementally, pause the consumer while bronze moves on, let
maintenance destroy the replay window (the platform refuses first; an operator then forces it),
watch the `replay_window` check fail, let the rebuild sensor launch the rebuild, verify silver
against the pinned bronze snapshot, resume incremental runs and verify silver again. The story
runs on the demo's deployment (`cdf_platform.demo.deployment`: the warm engine, the run worker,
the code server and the daemon, on Dagster's SQLite instance under `<workdir>/dagster_home`):
each job is launched through the code location as the UI's Launchpad launches it, and the
sensors are started and stopped as a user does on their pages, so the UI shows every run, tick
and check evaluation of the story where it shows a deployment's. The event log
(`bronze/accounts_cdc`, `changes: events`) goes through every step with the row tables; its
silver is verified against the fold of the bronze events instead of a snapshot of rows.

`DemoStory` holds the story's steps; `cdf-platform demo` tells it through
`cdf_platform.demo.command`. What it reads back is read by
`cdf_platform.demo.story.table_rows` (the tables' rows, by deltalake) and
`cdf_platform.demo.story.dagster_figures` (runs and checks).
"""

import itertools
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import dagster as dg
from dagster._core.scheduler.instigation import InstigatorTick

from cdf_platform.core.config import ALLOW_DESTRUCTIVE_ENV, LAKE_ROOT_ENV
from cdf_platform.core.lake import Lake
from cdf_platform.core.spec.modes import ChangeSource
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.demo.data.bronze_assets import DEMO_TABLES
from cdf_platform.demo.data.events import folded_rows
from cdf_platform.demo.data.gold_asset import CUSTOMER_ORDER_TOTALS_KEY
from cdf_platform.demo.deployment import (
    POLL_SECONDS,
    RUN_TIMEOUT_SECONDS,
    DemoDeployment,
    DeploymentFailed,
)
from cdf_platform.demo.story.dagster_figures import (
    NOT_PERMITTED,
    REFUSED,
    check_figures,
    latest_metadata,
    refusal,
    tag_incident,
)
from cdf_platform.demo.story.steps import DemoFailed, Step
from cdf_platform.demo.story.table_rows import data_columns, table_rows
from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.jobs.maintenance_jobs import MAINTENANCE_JOB, maintenance_run_config
from cdf_platform.orchestration.sensors.incremental_sensor import INCREMENTAL_SENSOR
from cdf_platform.orchestration.sensors.rebuild_sensor import REBUILD_SENSOR
from cdf_platform.orchestration.shared.keys import BRONZE_PREFIX
from cdf_platform.planning.status import pipeline_status
from cdf_platform.services.service import wait_for
from cdf_platform.state.control import ControlTable

logger = logging.getLogger(__name__)

DEMO_DIR = ".demo"


def say(text: str) -> None:
    """Tell the story's progress (the demo's log)."""
    logger.info("%s", text)


# Check evaluations while the consumer is paused, and the least time between them: 0.01 h, so
# that each plots less headroom than the one before at 2 decimals.
HEADROOM_EVALUATIONS = 3
HEADROOM_STEP_SECONDS = 37.0


class DemoStory:
    """The demo's state: work folder, deployment, instance, and the steps run so far."""

    def __init__(
        self,
        workdir: Path,
        *,
        batch_size: int,
        retention_seconds: int,
        lake_root: str | None = None,
        store_env: dict[str, str] | None = None,
        storage: StorageConfig | None = None,
    ) -> None:
        self.workdir = workdir.resolve()
        self.batch_size = batch_size
        self.retention_seconds = retention_seconds
        self.steps: list[Step] = []
        # A clean start: the demo owns this folder (never the user's DAGSTER_HOME or lake).
        shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir.mkdir(parents=True)
        if lake_root is None:
            (self.workdir / "lake").mkdir()
        # The deployment's processes get its instance's home in their environment
        # (`DemoDeployment.env`); the story opens that instance from its folder.
        self.deployment = DemoDeployment(self.workdir)
        self.home = self.deployment.home
        # The story's own lake, and the deployment's processes told where it is and how its
        # store is reached (they build theirs from their environment, as a deployment does).
        self.lake = Lake.from_environment(
            lake_root=lake_root or str(self.workdir / "lake"),
            storage=storage or ENVIRONMENT_ONLY,
        )
        self.deployment.env.update({LAKE_ROOT_ENV: self.lake.lake_root, **(store_env or {})})
        self.control = ControlTable(self.lake.control_root, storage=self.lake.storage)
        self.specs = self.lake.specs()
        self._instance: dg.DagsterInstance | None = None
        self.sensor_started: dict[str, float] = {}
        self.rebuild_tick = 0.0
        self.rebuild_runs: list[str] = []

    @property
    def instance(self) -> dg.DagsterInstance:
        if self._instance is None:
            raise DemoFailed("the demo's deployment is not started")
        return self._instance

    def step(self, name: str, action: Callable[[Step], None]) -> None:
        """Run one step, timing it and keeping its figures."""
        say(f"==> {name}")
        current = Step(name)
        started = time.monotonic()
        action(current)
        current.seconds = time.monotonic() - started
        self.steps.append(current)
        shown = ", ".join(f"{k}={v}" for k, v in current.figures.items())
        say(f"    done in {current.seconds:.1f} s: {shown}")

    def start_deployment(self, current: Step) -> None:
        """The engine, run worker, code server and daemon, each waited for."""
        self._instance = self.deployment.start()
        for service in (
            self.deployment.engine,
            self.deployment.run_worker,
            self.deployment.code_server,
            self.deployment.daemon,
        ):
            current.figures[service.name.replace(" ", "_")] = f"pid {service.pid}"

    def bronze_batch(self, current: Step) -> None:
        """One deterministic batch into every demo bronze table (demo_bronze_job)."""
        config = {"config": {"batch_size": self.batch_size}}
        result = self.deployment.run(
            "demo_bronze_job",
            {"ops": {f"bronze__{table}": config for table in DEMO_TABLES}},
        )
        if not result.success:
            raise DemoFailed(f"demo_bronze_job failed: run {result.run_id}")
        for table in DEMO_TABLES:
            figures = result.metadata(dg.AssetKey(["bronze", table]))
            current.figures[f"bronze_{table}_version"] = figures.get("version")

    def silver_by_sensor(self, current: Step) -> None:
        """incremental_sensor (started if it is not) brings every silver to its bronze's
        latest version; then gold_job reads silver's change feed (its mode)."""
        since = time.time()
        if INCREMENTAL_SENSOR not in self.sensor_started:
            self.sensor_started[INCREMENTAL_SENSOR] = self.deployment.start_sensor(
                INCREMENTAL_SENSOR
            )

        def caught_up() -> bool:
            failed = self.deployment.failed_runs(since)
            if failed:
                raise DemoFailed(f"runs failed: {', '.join(failed)}")
            return all(pipeline_status(spec, self.control).version_lag == 0 for spec in self.specs)

        wait_for(
            "every silver caught up by incremental_sensor",
            caught_up,
            RUN_TIMEOUT_SECONDS,
            POLL_SECONDS,
            error=DeploymentFailed,
        )
        self.deployment.wait_idle()
        for spec in self.specs:
            figures = latest_metadata(self.instance, dg.AssetKey(["silver", spec.id]))
            current.figures[f"{spec.id}_mode"] = figures.get("mode")
            current.figures[f"{spec.id}_rows"] = "+{}/~{}/-{}".format(
                figures.get("rows_inserted"),
                figures.get("rows_updated"),
                figures.get("rows_deleted"),
            )
            current.figures[f"{spec.id}_watermark"] = figures.get("watermark_after")
        gold = self.deployment.run("gold_job")
        current.figures["gold_ok"] = gold.success
        # full on the first run, then incremental: silver's rebuild is a MERGE, so its change
        # feed (gold's input) stays readable across the outage.
        current.figures["gold_mode"] = gold.metadata(CUSTOMER_ORDER_TOTALS_KEY).get("mode")
        if not gold.success:
            raise DemoFailed(f"gold_job failed: run {gold.run_id}")

    def pause_consumer(self, current: Step) -> None:
        """Stop incremental_sensor, as a user does on its page: silver stops following."""
        self.deployment.stop_sensor(INCREMENTAL_SENSOR)
        self.sensor_started.pop(INCREMENTAL_SENSOR, None)
        self.deployment.wait_idle()
        current.figures[INCREMENTAL_SENSOR] = "stopped"

    def checks(self, current: Step, *, expect_passed: bool) -> None:
        """checks_job; record each pipeline's replay_window figures. A checks run failed by
        its blocking check (a LOST window) is tagged with the windows' incident codes."""
        result = self.deployment.run("checks_job")
        codes = []
        for spec in self.specs:
            passed, figures = check_figures(
                self.instance, dg.AssetKey(["silver", spec.id]), REPLAY_WINDOW
            )
            current.figures[f"{spec.id}_window"] = figures.get("state")
            # As plotted: a caught-up consumer's is the retention horizon, 0 once lost.
            headroom = figures.get("headroom_hours")
            current.figures[f"{spec.id}_headroom_h"] = "-" if headroom is None else headroom
            current.figures[f"{spec.id}_watermark"] = figures.get("watermark")
            current.figures[f"{spec.id}_latest"] = figures.get("latest_version")
            codes.append(figures.get("problem_code") if not passed else None)
            if passed is not expect_passed:
                raise DemoFailed(
                    f"{spec.id}: replay_window passed={passed}, expected {expect_passed}"
                )
        if not result.success:
            tag_incident(self.instance, result.run_id, codes)

    def set_retention(self, current: Step, value: str) -> None:
        """Set bronze's `delta.deletedFileRetentionDuration` on every demo table: the
        operator's ALTER TABLE, committed by deltalake (a property change needs no Spark)."""
        for spec in self.specs:
            open_delta_table(spec.source, self.lake.storage).alter.set_table_properties(
                {"delta.deletedFileRetentionDuration": value}
            )
        current.figures["deletedFileRetentionDuration"] = value

    def maintenance(self, current: Step, *, override: bool, expected: str) -> None:
        """VACUUM RETAIN 0 HOURS on every bronze table (`allow_window_loss` if `override`),
        launched as from the UI's Launchpad; its outcome must be `expected`: `not permitted`
        (the deployment refuses destructive run configs), `refused` (a consumer is behind) or
        `done`."""
        for spec in self.specs:
            table = dg.AssetKey([BRONZE_PREFIX, spec.bronze_name])
            config = maintenance_run_config(
                table, retain_zero=True, allow_window_loss=override, listing_parallelism=4
            )
            result = self.deployment.run(MAINTENANCE_JOB, config)
            outcome = "done" if result.success else refusal(result)
            if not result.success:  # refused: the runs list says by what
                tag_incident(self.instance, result.run_id, (c for c, _ in result.failures()))
            if outcome != expected:
                raise DemoFailed(
                    f"{MAINTENANCE_JOB} of {table.to_user_string()}: {outcome}, expected "
                    f"{expected} (run {result.run_id})"
                )
            current.figures[f"{spec.bronze_name}_vacuum"] = outcome

    def permit_destructive(self, current: Step) -> None:
        """The operator's step: `CDF_ALLOW_DESTRUCTIVE=1` in the environment of the code
        server and the run worker, both restarted, as a deployment changes a setting."""
        say(
            "    the operator sets CDF_ALLOW_DESTRUCTIVE=1 for the code server and the run "
            "worker and restarts them"
        )
        self.deployment.restart_code({ALLOW_DESTRUCTIVE_ENV: "1"})
        current.figures["allow_destructive"] = True

    def rebuild_by_sensor(self, current: Step) -> None:
        """Start rebuild_sensor: the daemon's tick requests one rebuild per lost window; wait
        for that tick and its runs."""
        started = self.deployment.start_sensor(REBUILD_SENSOR)
        self.sensor_started[REBUILD_SENSOR] = started

        def requested() -> InstigatorTick | None:
            for tick in self.deployment.ticks(REBUILD_SENSOR, started - 1):
                if tick.run_ids:
                    return tick
            return None

        tick = wait_for(
            "rebuild_sensor's requests",
            requested,
            RUN_TIMEOUT_SECONDS,
            POLL_SECONDS,
            error=DeploymentFailed,
        )
        current.figures["tick_requests"] = len(tick.run_ids)
        results = [self.deployment.wait(run_id) for run_id in tick.run_ids]
        failed = [result.run_id for result in results if not result.success]
        if len(tick.run_ids) != len(self.specs) or failed:
            raise DemoFailed(f"rebuild_sensor requested {len(tick.run_ids)} runs; failed {failed}")
        self.rebuild_tick = tick.timestamp
        self.rebuild_runs = list(tick.run_ids)
        for spec in self.specs:
            key = dg.AssetKey(["silver", spec.id])
            figures = next(filter(None, (r.metadata(key) for r in results)), {})
            current.figures[f"{spec.id}_rebuilt_at"] = figures.get("watermark_after")
            current.figures[f"{spec.id}_incident"] = figures.get("incident_code")

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
            self.deployment.run("checks_job")
            for spec in self.specs:
                _passed, figures = check_figures(
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
            storage = self.lake.storage
            columns = data_columns(spec.target, storage)
            silver = table_rows(spec.target, columns, storage, live_only=True)
            if spec.changes is ChangeSource.EVENTS:
                bronze = folded_rows(spec.source, columns, version=watermark, storage=storage)
            else:
                bronze = table_rows(spec.source, columns, storage, version=watermark)
            diff = sum(((bronze - silver) + (silver - bronze)).values())
            current.figures[f"{spec.id}_rows"] = silver.total()
            current.figures[f"{spec.id}_differences"] = diff
            if diff:
                raise DemoFailed(f"{spec.id}: silver differs from bronze@{watermark} by {diff}")

    def repaired_once(self, current: Step) -> None:
        """rebuild_sensor's ticks after its repair requested nothing: the loss was repaired
        once. The story leaves incremental_sensor and rebuild_sensor running; the sensors and
        the schedule it never touched start as the definitions say (`make dev`: running,
        maintenance schedules stopped)."""
        ticks = [
            tick
            for tick in self.deployment.ticks(REBUILD_SENSOR, self.rebuild_tick - 1)
            if tick.timestamp > self.rebuild_tick
        ]
        again = [tick for tick in ticks if tick.run_ids]
        if again:
            raise DemoFailed(f"rebuild_sensor requested again: {[t.run_ids for t in again]}")
        current.figures["later_ticks"] = len(ticks)
        current.figures["later_requests"] = 0

    def tell(self) -> None:
        """`run()`, then stop the deployment however the story ends."""
        try:
            self.run()
        finally:
            self.deployment.stop()

    def run(self) -> None:
        """The whole story, on bronze tables that keep the demo's compression of a week of
        history (`retention_seconds`), so the headroom plot moves within minutes. The tables
        keep it after the story: the UI's plots stay on the demo's scale (a caught-up
        consumer's headroom is that whole retention), and `make dev`'s incremental sensor
        applies a new bronze commit well within it."""
        week = f"interval {self.retention_seconds} seconds"
        self.step("deployment: engine, run worker, code server, daemon", self.start_deployment)
        self.step("seed bronze", self.bronze_batch)
        self.step("bronze retention: the demo's week", lambda s: self.set_retention(s, week))
        self.step("initial silver load (incremental_sensor) + gold", self.silver_by_sensor)
        self.step("bronze batch 2", self.bronze_batch)
        self.step("incremental run (incremental_sensor) + gold", self.silver_by_sensor)
        self.step("checks: windows healthy", lambda s: self.checks(s, expect_passed=True))
        self.step("consumer paused: incremental_sensor stopped", self.pause_consumer)
        for n in (3, 4):
            self.step(f"bronze batch {n}", self.bronze_batch)
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
        say(f"    waiting {wait:.1f} s: the paused consumer's first change leaves the window")
        time.sleep(wait)
        self.step(
            "maintenance forced by the operator",
            lambda s: self.maintenance(s, override=True, expected="done"),
        )
        self.step("checks: replay window LOST", lambda s: self.checks(s, expect_passed=False))
        self.step("rebuild_sensor started: it launches the rebuilds", self.rebuild_by_sensor)
        self.step("verify silver = bronze snapshot", self.verify)
        self.step("bronze batch 5", self.bronze_batch)
        self.step("incremental_sensor started again + gold", self.silver_by_sensor)
        self.step("verify silver = bronze again", self.verify)
        self.step("checks: windows healthy again", lambda s: self.checks(s, expect_passed=True))
        self.step("rebuild_sensor: each loss repaired once", self.repaired_once)

    def summary(self) -> str:
        """The steps and their figures as a table."""
        width = max(len(s.name) for s in self.steps)
        lines = [f"{'step':<{width}}  {'seconds':>7}  figures", "-" * (width + 40)]
        for s in self.steps:
            figures = ", ".join(f"{k}={v}" for k, v in s.figures.items())
            lines.append(f"{s.name:<{width}}  {s.seconds:>7.1f}  {figures}")
        return "\n".join(lines)
