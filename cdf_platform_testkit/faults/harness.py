"""Runs one generated history against the real engine and checks every consumer run against the
snapshot oracle and the lost-window ground truth.

Per run: the expected mode (initial load, no-op, incremental, or a rebuild exactly when the
ground truth says the window was lost or bronze was reset), the watermark (silver's log, the
RunResult and the control table all equal the latest version at plan time), and silver equal to
the oracle (SCD2 ordered by `sequence_by`: every version equal to the history oracle's). Lost
windows are counted as actual (ground truth), detected (a rebuild with an incident, or the
classified error under FAIL_FAST), silent (actual, not detected) and spurious (detected, not
actual). After a spec edit (`cdf_platform_testkit.faults.spec_edits`) the oracles conform rows
under the edited spec and the next run must rebuild (SPEC_CHANGED, unless a lost window is the
reason; under FAIL_FAST it raises `SpecChanged` and the operator's rebuild follows); an edit of
`keys` rewrites silver in the new shape, and of an SCD2 history's keys is refused
(`SpecChangeRefused`, nothing written; the operator restores the previous spec). Given a gold
consumer (`cdf_platform_testkit.faults.gold`), the harness hands it the rows the oracle expects
live after each run, and it materializes (or skips) and checks itself against the gold oracle.

Example:
    >>> report = HistoryHarness(spark, lake, seed=3).run()  # doctest: +SKIP
    >>> report.divergences, report.silent_losses  # doctest: +SKIP
    ([], 0)
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from cdf_platform.core.errors import (
    CdfNotEnabled,
    CdfPlatformError,
    IncompatibleSchemaChange,
    ReplayWindowLost,
    SourceReset,
    SpecChanged,
    SpecChangeRefused,
)
from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.plan import RunMode
from cdf_platform.planning.run_result import RunResult
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform.state.quarantine import quarantine_path
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_testkit.faults.bronze_model import (
    DELETED_FILE_RETENTION,
    LONG_RETENTION,
    BronzeTable,
    Row,
)
from cdf_platform_testkit.faults.bronze_model import KEY as BRONZE_KEY
from cdf_platform_testkit.faults.change_oracle import ChangeOracle
from cdf_platform_testkit.faults.gold import GoldConsumer
from cdf_platform_testkit.faults.history import (
    CI_PROFILE,
    CONCURRENT_OPS,
    RUNS,
    SPEC_EDITS,
    HistoryProfile,
    Op,
    apply_bronze_op,
    bronze_columns,
    initial_rows,
    plan_history,
)
from cdf_platform_testkit.faults.history_oracle import END_AT, HistoryOracle
from cdf_platform_testkit.faults.modeling import (
    conform_snapshot,
    history_problems,
    sequenced_history_problems,
)
from cdf_platform_testkit.faults.options import HistoryConfig, config_for
from cdf_platform_testkit.faults.oracle import (
    LostWindow,
    RunWindow,
    Silver,
    lost_window,
    normalize_value,
    read_rows,
    read_silver,
    silver_problems,
)
from cdf_platform_testkit.faults.spec_edits import QUARANTINE_RULE, EditKind, SpecShape

# The classified error a FAIL_FAST run must raise for each ground-truth reason.
FAIL_FAST_ERRORS: dict[str, type[CdfPlatformError]] = {
    "reset": SourceReset,
    "log": ReplayWindowLost,
    "files": ReplayWindowLost,
    "time": ReplayWindowLost,
    "cdf": CdfNotEnabled,
    "schema": IncompatibleSchemaChange,
}
SQUEEZE_SECONDS = 1.5


# The model's operations whose commits change no row (`BronzeTable._record`'s names).
NO_ROW_OPERATIONS = frozenset({"OPTIMIZE", "SET TBLPROPERTIES", "VACUUM"})


class Divergence(AssertionError):
    """The engine did something the oracle does not allow."""


@dataclass
class HistoryReport:
    """Figures of one history."""

    seed: int
    delete_mode: str
    fallback_mode: str
    operations: list[str] = field(default_factory=list)
    runs: int = 0
    modes: Counter[str] = field(default_factory=Counter)
    incidents: Counter[str] = field(default_factory=Counter)
    loss_reasons: Counter[str] = field(default_factory=Counter)
    actual_losses: int = 0
    detected_losses: int = 0
    silent_losses: int = 0
    spurious_rebuilds: int = 0
    divergences: list[str] = field(default_factory=list)
    seconds: float = 0.0
    gold: dict[str, Any] | None = None
    spec_edits: list[str] = field(default_factory=list)  # what each edit changed, in order

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {
            "seed": self.seed,
            "delete_mode": self.delete_mode,
            "fallback_mode": self.fallback_mode,
            "operations": self.operations,
            "runs": self.runs,
            "modes": dict(self.modes),
            "incidents": dict(self.incidents),
            "loss_reasons": dict(self.loss_reasons),
            "actual_losses": self.actual_losses,
            "detected_losses": self.detected_losses,
            "silent_losses": self.silent_losses,
            "spurious_rebuilds": self.spurious_rebuilds,
            "divergences": self.divergences,
            "seconds": round(self.seconds, 2),
            "gold": self.gold,
            "spec_edits": self.spec_edits,
        }


def history_spec(lake: Path, seed: int, config: HistoryConfig | None = None) -> PipelineSpec:
    """The pipeline of history `seed`: its options are the seed's config
    (`cdf_platform_testkit.faults.options.config_for`) unless `config` is given."""
    return PipelineSpec(
        id=f"fuzz_{seed}",
        source=str(lake / "bronze"),
        target=str(lake / "silver"),
        **(config or config_for(seed)).fields(),
    )


class HistoryHarness:
    """One seeded history, its pipeline and the oracle's running state."""

    def __init__(
        self,
        spark: SparkSession,
        lake: Path,
        seed: int,
        profile: HistoryProfile = CI_PROFILE,
        *,
        config: HistoryConfig | None = None,
        gold: GoldConsumer | None = None,
    ) -> None:
        self.spark = spark
        self.lake = lake
        self.seed = seed
        self.profile = profile
        self.config = config or config_for(seed)
        self.rng = random.Random(seed * 7919 + 1)
        # Spec edits draw from their own generator: bronze's history is the seed's either way.
        self.edit_rng = random.Random(seed * 4391 + 3)
        self.spec = history_spec(lake, seed, self.config)
        self.control = ControlTable(str(lake / "_control"))
        self.report = HistoryReport(
            seed, self.spec.delete_mode.value, self.spec.fallback_mode.value
        )
        self.bronze: BronzeTable | None = None
        # Oracle state after the last successful run.
        self.watermark: int | None = None
        self.table_id: str | None = None
        self.oracle = ChangeOracle(self.config, soft=self.config.deletes == "soft")
        # The same pipeline with its quarantine rule as `warn`: silver plus the quarantine.
        self.warned_oracle = ChangeOracle(_warned(self.config), soft=self.config.deletes == "soft")
        # SCD2 ordered by `sequence_by`: every version is checked against the history oracle.
        self.sequenced_history = self.config.history == "scd2" and self.config.on("sequence_by")
        self.history_oracle = HistoryOracle(self.config)
        self.columns: list[str] = []
        # The row-shaping fields silver was last built under (None before the first run).
        self.built: SpecShape | None = None
        self.silver = Silver((), {}, ())
        self.history: list[Row] = []  # SCD2 silver's rows after the last run
        self.expected_history: list[Row] = []  # the history oracle's rows after the last run
        # The gold consumer, materialized after the runs and checked against its oracle.
        self.gold = gold
        self._control_behind = False
        self.last_plan_at = datetime.now(UTC).replace(tzinfo=None)

    # -- driving -------------------------------------------------------------------------------

    def start(self, rows: list[Row] | None = None, *, tenant: bool = False) -> BronzeTable:
        """Create bronze with `rows` (default: drawn from the seed); `tenant`: with the column a
        keys edit adds to the key."""
        columns = bronze_columns(self.config, tenant=tenant)
        chosen = initial_rows(self.rng, columns) if rows is None else rows
        self.bronze = BronzeTable.create(self.spec.source, chosen, columns)
        return self.bronze

    def run(self, plan: list[Op] | None = None) -> HistoryReport:
        """Play the whole history (`plan`, default the seed's); stop at the first divergence
        (recorded in the report)."""
        started = time.monotonic()
        plan = plan_history(self.seed, self.profile) if plan is None else plan
        self.start(tenant=Op.EDIT_KEYS in plan)
        try:
            for op in plan:
                self.step(op)
            if self.gold is not None:
                self._check_gold(self.gold.finish(self.live_rows()))
        except Divergence as err:
            self.report.divergences.append(str(err))
        self.report.seconds = time.monotonic() - started
        if self.gold is not None:
            self.report.gold = self.gold.report.as_dict()
        return self.report

    def step(self, op: Op) -> None:
        """Apply one planned step."""
        assert self.bronze is not None
        if op in RUNS:
            self.report.operations.append(op.value)
            self.consumer_run(op)
        elif op in SPEC_EDITS:
            self.edit_spec(SPEC_EDITS[op])
        else:
            applied = apply_bronze_op(op, self.bronze, self.rng, self.profile)
            self.report.operations.append(applied.value)

    def edit_spec(self, kind: EditKind, shape: SpecShape | None = None) -> None:
        """Edit the pipeline's spec: `shape` (default: an edit of `kind` drawn from the
        seed's edit generator); every later run uses it, and the oracles conform under it. An
        edit of the keys of SCD2 silver is refused by the next run, tried at once: nothing is
        written, and the previous spec is restored."""
        current = self.config.spec_shape()
        if shape is None:
            shape, word = current.edited(kind, self.edit_rng)
        else:
            word = f"{current.fields()} -> {shape.fields()}"
        self.report.operations.append(f"edit_{kind.value}")
        self.report.spec_edits.append(word)
        config = replace(self.config, shape=shape)
        if kind is EditKind.KEYS and config.history == "scd2" and self.built is not None:
            self._check_refused(history_spec(self.lake, self.seed, config))
            return
        self.config = config
        self.spec = history_spec(self.lake, self.seed, config)
        self.oracle.config = config
        self.warned_oracle.config = _warned(config)
        self.history_oracle.config = config

    def _check_refused(self, edited: PipelineSpec) -> None:
        """A run of `edited` (keys of SCD2 silver changed) must be refused before Spark starts,
        with the action in its message, silver and the watermarks untouched."""
        silver_version = self._silver_version()
        control = self.control.read_states().get(self.spec.id, {}).get("last_commit_version")

        def no_spark() -> SparkSession:
            raise self._fail("a refused spec edit started Spark")

        try:
            PipelineRunner.on(self.control, no_spark).run(edited)
        except SpecChangeRefused as err:
            if "What to do" not in str(err):
                raise self._fail(f"message without the action: {err}") from err
            self.report.incidents[err.incident_code] += 1
        except CdfPlatformError as err:
            raise self._fail(f"an SCD2 keys edit raised {err!r}, not SpecChangeRefused") from err
        else:
            raise self._fail("an SCD2 keys edit was not refused")
        state = read_silver_state(self.spec.target, self.spec.id)
        after = self.control.read_states().get(self.spec.id, {}).get("last_commit_version")
        if (self._silver_version(), state.watermark, after) != (
            silver_version,
            self.watermark,
            control,
        ):
            raise self._fail("a refused spec edit wrote silver or moved a watermark")

    def _edit_pending(self) -> bool:
        """Whether the spec differs from the one silver was last built under."""
        return self.built is not None and self.built != self.config.spec_shape()

    def consumer_run(self, op: Op) -> None:
        """One consumer run of kind `op`, checked against the oracle."""
        assert self.bronze is not None
        bronze = self.bronze
        if op is Op.RUN_SQUEEZED:
            bronze.set_properties({DELETED_FILE_RETENTION: "interval 1 seconds"})
            time.sleep(SQUEEZE_SECONDS)
        latest = bronze.version
        now = time.time()
        truth = self._ground_truth(latest, now)
        control = self.control.read_states().get(self.spec.id, {}).get("last_commit_version")
        self._control_behind = control != self.watermark
        plan_at = datetime.now(UTC).replace(tzinfo=None)
        silver_version = self._silver_version()
        edited = self._edit_pending()
        result: RunResult | None = None
        error: CdfPlatformError | None = None
        try:
            result = self._run_engine(op, latest)
        except CdfPlatformError as err:
            error = err
        self.report.runs += 1
        if op is Op.RUN_SQUEEZED:
            bronze.set_properties({DELETED_FILE_RETENTION: LONG_RETENTION})
        if truth is not None:
            self.report.actual_losses += 1
            self.report.loss_reasons[truth.reason] += 1
        if error is not None:
            self._check_failure(error, truth, silver_version, edited=edited)
            if truth is not None:
                self.report.detected_losses += 1
            # The operator's answer to a FAIL_FAST incident: a requested rebuild.
            latest = bronze.version
            plan_at = datetime.now(UTC).replace(tzinfo=None)
            result = PipelineRunner.on(self.control, lambda: self.spark).run(
                self.spec, force_rebuild=True
            )
            truth = None
            self._check_result(result, latest, truth, requested=True, edited=edited)
        else:
            assert result is not None
            self._check_result(result, latest, truth, requested=False, edited=edited)
        self.verify_silver(result.mode, result.incident_code, latest, plan_at)
        if self.gold is not None:
            rebuilt = result.mode is RunMode.REBUILD
            self._check_gold(self.gold.after_run(rebuilt=rebuilt, live_rows=self.live_rows()))

    def _run_engine(self, op: Op, latest: int) -> RunResult:
        if op is not Op.RUN_WITH_COMMIT:
            return PipelineRunner.on(self.control, lambda: self.spark).run(self.spec)
        assert self.bronze is not None
        bronze = self.bronze
        concurrent = self.rng.choice(CONCURRENT_OPS)
        op_rng = random.Random(self.rng.random())
        delay = self.rng.uniform(0.0, 2.0)
        self.report.operations.append(f"{concurrent.value}@during_run")
        if self.rng.random() < 0.5:
            # Lands right after the plan pinned `latest`, when the run starts Spark.
            fired: list[Op] = []

            def factory() -> SparkSession:
                if not fired:
                    fired.append(apply_bronze_op(concurrent, bronze, op_rng, self.profile))
                return self.spark

            result = PipelineRunner.on(self.control, factory).run(self.spec)
            if not fired:  # a no-op never starts Spark: commit after it instead
                apply_bronze_op(concurrent, bronze, op_rng, self.profile)
            return result
        # Lands at a random instant of the run, from another thread.
        runner = PipelineRunner.on(self.control, lambda: self.spark)
        prepared = runner.prepare(self.spec)
        plan = prepared.plan
        if plan.end_version != latest:
            raise Divergence(f"plan pinned {plan.end_version}, bronze latest was {latest}")

        def commit() -> None:
            time.sleep(delay)
            apply_bronze_op(concurrent, bronze, op_rng, self.profile)

        writer = threading.Thread(target=commit)
        writer.start()
        try:
            return runner.finish(prepared)
        finally:
            writer.join()

    # -- ground truth and checks ---------------------------------------------------------------

    def live_rows(self) -> list[Row]:
        """The rows the oracle expects live in silver after the last run: not soft-deleted,
        and in SCD2 silver the current versions."""
        if self.sequenced_history:
            return [row for row in self.expected_history if row[END_AT] is None]
        return [dict(row.values) for row in self.oracle.rows.values() if not row.deleted]

    def _check_gold(self, problems: list[str]) -> None:
        if problems:
            raise self._fail(f"{problems[:5]}")

    def _ground_truth(self, latest: int, now: float) -> LostWindow | None:
        assert self.bronze is not None
        if self.watermark is None or self.table_id is None:
            return None
        return lost_window(
            self.bronze, self.watermark, latest, table_id_at_watermark=self.table_id, now=now
        )

    def _silver_version(self) -> int | None:
        state = read_silver_state(self.spec.target, self.spec.id)
        return state.silver_version

    def _fail(self, message: str) -> Divergence:
        ops = ", ".join(self.report.operations[-8:])
        edits = f"; spec edits: {self.report.spec_edits}" if self.report.spec_edits else ""
        return Divergence(
            f"seed {self.seed} run {self.report.runs}: {message} (last ops: {ops}{edits})"
        )

    def _check_failure(
        self,
        error: CdfPlatformError,
        truth: LostWindow | None,
        silver_version: int | None,
        *,
        edited: bool,
    ) -> None:
        fail_fast = self.spec.fallback_mode is FallbackMode.FAIL_FAST
        if not fail_fast or (truth is None and not edited):
            if truth is None:
                self.report.spurious_rebuilds += 1
            raise self._fail(f"run raised {error!r} (ground truth: {truth})")
        # A lost window is the problem even when the spec was edited too.
        wanted = FAIL_FAST_ERRORS[truth.reason] if truth is not None else SpecChanged
        if not isinstance(error, wanted):
            raise self._fail(f"{truth} raised {type(error).__name__}, not {wanted.__name__}")
        if "What to do" not in str(error):
            raise self._fail(f"message without the action: {error}")
        if self._silver_version() != silver_version:
            raise self._fail("a FAIL_FAST run wrote to silver")
        state = read_silver_state(self.spec.target, self.spec.id)
        if state.watermark != self.watermark:
            raise self._fail(f"FAIL_FAST moved the watermark {self.watermark} -> {state.watermark}")
        self.report.incidents[error.incident_code] += 1

    def _changes_no_rows(self, watermark: int, latest: int) -> bool:
        """Whether the model's versions (watermark, latest] hold only operations that change no
        row (OPTIMIZE, property changes, VACUUM) and leave the columns as they were."""
        assert self.bronze is not None
        versions = self.bronze.versions
        return versions[watermark].columns == versions[latest].columns and all(
            versions[v].operation in NO_ROW_OPERATIONS for v in range(watermark + 1, latest + 1)
        )

    def _check_result(
        self,
        result: RunResult,
        latest: int,
        truth: LostWindow | None,
        *,
        requested: bool,
        edited: bool,
    ) -> None:
        report = self.report
        report.modes[result.mode.value] += 1
        if result.incident_code and not requested:
            report.incidents[result.incident_code] += 1
        if requested:
            expected_mode = RunMode.REBUILD
        elif self.watermark is None:
            expected_mode = RunMode.INITIAL_LOAD
        elif truth is not None or edited:
            expected_mode = RunMode.REBUILD
        elif self.watermark >= latest:
            expected_mode = RunMode.NOOP
        elif self._changes_no_rows(self.watermark, latest):
            expected_mode = RunMode.ADVANCE
        else:
            expected_mode = RunMode.INCREMENTAL
        if truth is not None:
            if result.mode is RunMode.REBUILD and result.incident_code:
                report.detected_losses += 1
                if (truth.reason == "reset") != (result.incident_code == "SOURCE_RESET"):
                    raise self._fail(f"{truth} recovered as {result.incident_code}")
            else:
                report.silent_losses += 1
        elif result.mode is RunMode.REBUILD and not requested and not edited:
            report.spurious_rebuilds += 1
        if result.mode is not expected_mode:
            raise self._fail(
                f"mode {result.mode.value}, expected {expected_mode.value} (truth: {truth}, "
                f"spec edited: {edited}, watermark {self.watermark}, latest {latest}, "
                f"incident {result.incident_code})"
            )
        spec_changed = SpecChanged.incident_code
        if edited and truth is None and not requested and result.incident_code != spec_changed:
            raise self._fail(f"a rebuild after a spec edit reported {result.incident_code}")
        if result.mode is RunMode.NOOP and result.spark_started and not self._control_behind:
            raise self._fail("a no-op run started Spark without a control table to repair")
        state = read_silver_state(self.spec.target, self.spec.id)
        control = self.control.read_states().get(self.spec.id, {})
        marks = (result.watermark_after, state.watermark, control.get("last_commit_version"))
        if marks != (latest, latest, latest):
            raise self._fail(f"watermarks (result, silver log, control) {marks} != {latest}")

    @property
    def _oracles(self) -> list[ChangeOracle]:
        """The oracle, and the one without the quarantine rule while the shape has one."""
        held = self.config.spec_shape().expectation is not None
        return [self.oracle, *([self.warned_oracle] if held else [])]

    def _check_quarantine(self, latest: int) -> None:
        """The invariant: silver's live keys and the quarantine's are the live keys of the
        spec with its quarantine rule as `warn` (apart), each quarantined row failing the rule.

        Raises:
            Divergence: the quarantine differs.
        """
        shape = self.config.spec_shape()
        path = quarantine_path(self.control.root, self.spec.id)
        held = self.control.query(path, "SELECT * FROM t")  # JVM-free; none: no table yet
        if shape.expectation is None:
            if held:
                raise self._fail(f"the quarantine holds {len(held)} row(s) without a rule")
            return
        live = {k for k, r in self.oracle.rows.items() if not r.deleted}
        warned = {k for k, r in self.warned_oracle.rows.items() if not r.deleted}
        found = sorted(r[BRONZE_KEY] for r in held)
        if found != sorted(warned - live) or not live <= warned:
            raise self._fail(
                f"quarantine at {latest} holds {found}, not {sorted(warned - live)} "
                f"(silver {sorted(live)}, with the rule as warn {sorted(warned)})"
            )
        for row in held:
            image = json.loads(row["row"])
            if list(row["failed_rules"]) != [QUARANTINE_RULE] or shape.passes(image):
                raise self._fail(f"quarantined row {image} does not fail {QUARANTINE_RULE}")

    def verify_silver(
        self, mode: RunMode, incident: str | None, latest: int, plan_at: datetime
    ) -> None:
        """Check silver against the oracle for a run of `mode` that left watermark `latest`
        (planned at `plan_at`), then adopt that state as the oracle's.

        Raises:
            Divergence: silver differs from the oracle.
        """
        assert self.bronze is not None
        bronze = self.bronze
        columns, raw = read_rows(bronze.path, latest)
        record = bronze.versions[latest]
        model = sorted(
            ({c: normalize_value(r.get(c)) for c in record.columns} for r in record.rows.values()),
            key=repr,
        )
        if sorted(columns) != sorted(record.columns) or sorted(raw, key=repr) != model:
            raise self._fail(f"harness model of bronze {latest} differs from delta-rs' snapshot")
        _, conformed = conform_snapshot(self.config, raw, columns)
        silver_columns = self.columns + [c for c in conformed if c not in self.columns]
        # A rebuild after an edit of the keys rewrites silver in the new shape.
        shape = self.config.spec_shape()
        built = self.built
        reshaped = mode is RunMode.REBUILD and built is not None and built.keys != shape.keys
        if reshaped:
            silver_columns = list(conformed)
        retired = set(silver_columns) - set(conformed)
        if mode is RunMode.INCREMENTAL:
            assert self.watermark is not None
            for oracle in self._oracles:
                oracle.incremental(bronze.versions, self.watermark, latest, silver_columns, retired)
            if self.sequenced_history:
                self.history_oracle.incremental(bronze.versions, self.watermark, latest)
        elif reshaped:
            for oracle in self._oracles:
                oracle.reshape(raw, latest, silver_columns)
        elif mode is not RunMode.NOOP:
            for oracle in self._oracles:
                oracle.rebuild(raw, latest, silver_columns, retired)
            if self.sequenced_history:
                # A rebuild that does not move the watermark forward opens a new generation.
                reset = incident == "SOURCE_RESET" or (
                    self.table_id is not None and self.table_id != bronze.table_id
                )
                if self.watermark is not None and (reset or latest <= self.watermark):
                    self.history_oracle.generation += 1
                self.history_oracle.rebuild(raw, latest, conformed)
        if self.spec.history.value == "scd2":
            if self.sequenced_history:
                # Every version of every key is the history oracle's.
                versions = self.history_oracle.expected(silver_columns, retired)
                self.expected_history = versions
                self.history, found = sequenced_history_problems(
                    self.spec.target, versions, silver_columns
                )
            else:
                # The open versions hold what SCD1 silver with hard deletes would hold.
                current = [dict(row.values) for row in self.oracle.rows.values()]
                self.history, found = history_problems(
                    self.spec.target, self.history, current, conformed, latest
                )
            if found:
                raise self._fail(f"silver history differs from the oracle at {latest}: {found[:5]}")
            self._check_quarantine(latest)
            self.watermark, self.table_id = latest, bronze.table_id
            self.columns = silver_columns
            self.built = shape
            return
        expected = self.oracle.expected()
        silver = read_silver(self.spec.target)
        reset = incident == "SOURCE_RESET" or (
            self.table_id is not None and self.table_id != bronze.table_id
        )
        window = RunWindow(
            mode=mode.value,
            watermark_before=self.watermark,
            watermark_after=latest,
            source_reset=reset,
            earliest_commit_time=self.last_plan_at,
            checked_at=datetime.now(UTC).replace(tzinfo=None),
        )
        # Rewritten in a new shape, every row is new: stamped with the snapshot's version.
        previous = Silver((), {}, ()) if reshaped else self.silver
        problems = silver_problems(silver, expected, silver_columns, previous, window)
        if problems:
            raise self._fail(f"silver differs from the oracle at {latest}: {problems[:5]}")
        self._check_quarantine(latest)
        self.watermark = latest
        self.table_id = bronze.table_id
        self.columns = silver_columns
        self.built = shape
        self.silver = silver
        if mode is not RunMode.NOOP:
            self.last_plan_at = plan_at


def _warned(config: HistoryConfig) -> HistoryConfig:
    """`config` with its quarantine rule as `warn`."""
    return replace(config, shape=config.spec_shape().warned())
