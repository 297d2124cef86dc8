"""`verify_pipeline`: the one way silver is verified against its spec applied to bronze, by the
command line (`cdf-platform verify`) and the Dagster `verify_job` alike.

1. Pin from the logs (JVM-free, the run's own plan): silver's version and watermark, and the
   bronze version to compare with. By default that is silver's watermark, the version silver
   claims to reflect: a silver behind bronze is not *wrong* for the changes a run has not
   taken yet, and comparing with bronze's latest would name every one of them. An explicit
   bronze version is compared as asked (a note says when it is past the watermark).
2. Compare (`cdf_platform.spark.reconcile.silver_comparison.compare_silver`): nothing is written.
3. Repair when asked and silver differs: a run of the pipeline (`PipelineRunner.repair`, with
   its load-log and state rows like every run's), the rebuild's quiet reconcile at the pinned
   bronze version, stamped like every platform commit (the watermark, at the pinned version:
   never backwards), so only the differing keys reach silver's change feed; then compared
   again, so REPAIRED is only recorded for a silver that now agrees.
4. Record the verification (`cdf_platform.state.verifications`), whatever it found.

Example:
    >>> result = verify_pipeline(spec, control, lambda: spark, repair=True)  # doctest: +SKIP
    >>> result.verification.outcome  # doctest: +SKIP
    <VerificationOutcome.REPAIRED: 'REPAIRED'>
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import SourceReset, VerificationRefused
from cdf_platform.planning.plan import RunMode, RunPlan
from cdf_platform.run.runner import PipelineRunner
from cdf_platform.run.strategy import WriteStrategy
from cdf_platform.spark.reconcile.silver_comparison import (
    SilverComparison,
    SilverPins,
    compare_silver,
)
from cdf_platform.spark.runtime.failures import classified_run
from cdf_platform.spark.runtime.session import assert_safe_spark_config, new_session
from cdf_platform.state.verifications import (
    Verification,
    VerificationOutcome,
    record_verification,
)
from cdf_platform.state.watermark import read_silver_state

if TYPE_CHECKING:
    from cdf_platform.core.spec.pipeline_spec import PipelineSpec
    from cdf_platform.run.context import SparkFactory
    from cdf_platform.state.control import ControlTable

VERIFY_MODE = RunMode.VERIFY_REPAIR.value
"""The mode a repair's commit (its `userMetadata`), load-log row and state row name."""


@dataclass(frozen=True)
class VerifyResult:
    """One verification: what was recorded, what the comparison found (after a repair: the
    comparison before it), and a note on what was compared."""

    verification: Verification
    comparison: SilverComparison
    note: str | None = None

    def as_metadata(self) -> dict[str, Any]:
        """Figures for the command line and Dagster metadata."""
        v = self.verification
        return {
            "pipeline_id": v.pipeline_id,
            "outcome": v.outcome.value,
            "bronze_version": v.bronze_version,
            "silver_version": v.silver_version,
            "expected_rows": self.comparison.expected_rows,
            "silver_rows": self.comparison.silver_rows,
            "differing_buckets": self.comparison.differing_buckets,
            "differing_keys": v.differing_keys,
            "sample_keys": self.comparison.sample,
            "repaired_silver_version": v.repaired_silver_version,
            "seconds": v.seconds,
            "message": v.message,
        }


def verify_pipeline(
    spec: PipelineSpec,
    control: ControlTable,
    spark_factory: SparkFactory,
    *,
    bronze_version: int | None = None,
    repair: bool = False,
    run_id: str | None = None,
) -> VerifyResult:
    """Verify `spec`'s silver (module doc) and record it; `repair` reconciles a difference.

    Raises:
        VerificationRefused: nothing to compare yet, a spec edit silver has not taken, a reset
            bronze, or a repair that would move the watermark backwards.
        CdfPlatformError: bronze cannot be read, or the spec applied to it is refused (as a
            rebuild's failure).
    """
    started = time.monotonic()
    run_id = run_id or uuid.uuid4().hex
    # Its plan and its repair are this pipeline's runs; a failure names the verification.
    runner = PipelineRunner(control, lambda _short: spark_factory(), rerun=_verify_command)
    plan = runner.prepare(spec).plan
    spec = plan.spec  # locations resolved
    pins, note = _pins(plan, bronze_version)
    repaired_version = None
    with classified_run(spec.id, rerun=_verify_command(spec)):
        spark = new_session(spark_factory())
        assert_safe_spark_config(spark)
        strategy = WriteStrategy.of(spec, control)
        found = compare_silver(spark, spec, pins, strategy.expected_rows)
        outcome = VerificationOutcome.EQUAL if found.equal else VerificationOutcome.DIFFERENT
        if repair and not found.equal:
            repaired_version = _repair(runner, plan, pins, run_id)
            after = SilverPins(pins.bronze_version, repaired_version, pins.bronze_timestamp)
            left = compare_silver(spark, spec, after, strategy.expected_rows)
            if left.equal:
                outcome = VerificationOutcome.REPAIRED
            else:
                note = _joined(note, f"the repair left {left.differing_keys} key(s) differing")
    verification = Verification(
        pipeline_id=spec.id,
        run_id=run_id,
        bronze_version=pins.bronze_version,
        silver_version=pins.silver_version,
        outcome=outcome,
        differing_keys=found.differing_keys,
        sample_keys=json.dumps(found.sample, default=str) if found.sample else None,
        repaired_silver_version=repaired_version,
        seconds=round(time.monotonic() - started, 3),
        message=note,
    )
    record_verification(control, verification)
    return VerifyResult(verification, found, note)


def _verify_command(spec: PipelineSpec) -> str:
    return f"`cdf-platform verify --pipeline {spec.id}`"


def _joined(*notes: str | None) -> str | None:
    return "; ".join(n for n in notes if n) or None


def _pins(plan: RunPlan, bronze_version: int | None) -> tuple[SilverPins, str | None]:
    """The versions to compare, and a note on them (module doc).

    Raises:
        VerificationRefused: silver cannot be compared with its spec now.
    """
    spec, silver = plan.spec, plan.silver
    refused = _refusal(plan)
    if refused is not None:
        raise VerificationRefused(refused, pipeline_id=spec.id, table=spec.target)
    assert silver.watermark is not None and silver.silver_version is not None
    watermark, latest = silver.watermark, plan.window.latest_version
    note = None
    if bronze_version is None:
        version = watermark
        if latest > watermark:
            note = (
                f"silver is behind bronze (watermark {watermark}, bronze {latest}): compared "
                f"with bronze at the watermark, the version silver claims to reflect"
            )
    else:
        version = bronze_version
        if not 0 <= version <= latest:
            raise VerificationRefused(
                f"bronze version {version} does not exist (bronze's latest is {latest})",
                pipeline_id=spec.id,
                table=spec.source,
                action=f"pass a bronze version between 0 and {latest}, or none (the watermark)",
            )
        if version > watermark:
            note = (
                f"bronze version {version} is past silver's watermark {watermark}: keys "
                f"changed in between differ until a run takes them"
            )
    pins = SilverPins(version, silver.silver_version, plan.window.timestamp_of(version))
    return pins, note


def _refusal(plan: RunPlan) -> str | None:
    """Why silver cannot be compared with its spec now, or None."""
    silver = plan.silver
    if not silver.exists or silver.watermark is None or silver.silver_version is None:
        return "silver holds no watermark yet: nothing to compare"
    if isinstance(plan.problem, SourceReset):
        return f"bronze was reset ({plan.problem.problem})"
    if plan.spec_change is not None:
        return f"{plan.spec_change.describe()}: silver follows the new spec after the next run"
    if plan.forward_only is not None:
        fields = ", ".join(plan.forward_only.fields)
        return (
            f"spec edits of {fields} were taken forward only: rows written before keep the "
            f"previous spec's values until `cdf-platform rebuild {plan.spec.id}`"
        )
    return None


def _repair(runner: PipelineRunner, plan: RunPlan, pins: SilverPins, run_id: str) -> int:
    """Reconcile silver with the spec applied to bronze at the pinned version (the rebuild's
    quiet reconcile, stamped with that watermark, as a run: `PipelineRunner.repair`); returns
    silver's version after it.

    Raises:
        VerificationRefused: the pinned version is below the watermark.
    """
    spec, silver, control = plan.spec, plan.silver, runner.control
    assert silver.watermark is not None
    if pins.bronze_version < silver.watermark:
        raise VerificationRefused(
            f"a repair at bronze version {pins.bronze_version} would move the watermark back "
            f"from {silver.watermark}",
            pipeline_id=spec.id,
            table=spec.target,
            action="repair at the watermark (verify without --bronze-version), or rebuild",
        )
    moved = read_silver_state(spec.target, spec.id, storage=control.storage).silver_version
    if moved != pins.silver_version:
        raise VerificationRefused(
            f"silver moved from version {pins.silver_version} to {moved} during the "
            "verification: the differences found may be gone",
            pipeline_id=spec.id,
            table=spec.target,
            action="verify again (a run writing silver meanwhile is the usual cause)",
        )
    runner.repair(plan, pins.bronze_version, run_id=run_id)
    repaired = read_silver_state(spec.target, spec.id, storage=control.storage).silver_version
    assert repaired is not None
    return repaired
