"""One asset check per expectation of a pipeline (`expectation_<name>` on its silver asset),
from the counts its latest run that judged rows wrote to the load log. Never starts Spark.

Each result plots the rule's failing rows, their fraction of the rows judged, and the rows
judged; it is a WARN above the rule's `warn_above` fraction, an ERROR above `error_above`, and
an ERROR when the latest run was refused by the rule (a `fail` rule). A `quarantine` rule's
result also plots how many rows the quarantine holds.

Example:
    >>> checks = expectation_checks(spec)  # doctest: +SKIP
"""

from collections.abc import Iterator, Mapping
from typing import Any

import dagster as dg

from cdf_platform.core.spec.expectations import Expectation, ExpectationAction, ExpectationCounts
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.shared.figures import count, text
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.state.quarantine import quarantined_rows

CHECK_PREFIX = "expectation_"


def check_name(expectation: Expectation) -> str:
    """The asset check of `expectation`."""
    return f"{CHECK_PREFIX}{expectation.name}"


def _latest_judged(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], ExpectationCounts] | None:
    """The newest load-log row with expectation counts, and its counts."""
    for row in reversed(rows):
        counts = ExpectationCounts.from_json(row.get("expectations"))
        if counts is not None:
            return row, counts
    return None


def _refused_by(rows: list[dict[str, Any]], expectation: Expectation) -> dict[str, Any] | None:
    """The newest load-log row when it is a run this (`fail`) rule refused."""
    if not rows or expectation.action is not ExpectationAction.FAIL:
        return None
    last = rows[-1]
    message = str(last.get("message") or "")
    refused = last.get("outcome") == "FAILED" and f"expectation {expectation.name!r}" in message
    return last if refused else None


def expectation_result(
    spec: PipelineSpec,
    expectation: Expectation,
    rows: list[dict[str, Any]],
    held: int | None = None,
) -> dg.AssetCheckResult:
    """The check of `expectation` from `spec`'s load-log rows (oldest first); `held`: the rows
    the quarantine holds (a `quarantine` rule's)."""
    name = check_name(expectation)
    base: dict[str, Any] = {"rule": text(expectation.rule), "action": text(expectation.action)}
    if held is not None:
        base["quarantined_rows"] = count(held)
    if (refused := _refused_by(rows, expectation)) is not None:
        return dg.AssetCheckResult(
            check_name=name,
            asset_key=silver_key(spec.id),
            passed=False,
            severity=dg.AssetCheckSeverity.ERROR,
            description=f"the latest run was refused: {refused['message']}",
            metadata={**base, "run_id": text(refused["run_id"])},
        )
    found = _latest_judged(rows)
    if found is None:
        return dg.AssetCheckResult(
            check_name=name,
            asset_key=silver_key(spec.id),
            passed=True,
            description="no run has judged rows under this rule yet",
            metadata=base,
        )
    row, counts = found
    failing, fraction = counts.failing.get(expectation.name, 0), counts.fraction(expectation.name)
    metadata = {
        **base,
        "failing_rows": count(failing),
        "failing_fraction": dg.MetadataValue.float(round(fraction, 6)),
        "judged_rows": count(counts.judged),
        "bronze_version": count(row.get("end_version")),
        "run_id": text(row["run_id"]),
    }
    severity = _severity(expectation, fraction)
    said = f"{failing} of {counts.judged} judged row(s) failed ({fraction:.2%})"
    return dg.AssetCheckResult(
        check_name=name,
        asset_key=silver_key(spec.id),
        passed=severity is None,
        severity=severity or dg.AssetCheckSeverity.WARN,
        description=f"{said}; {_limits(expectation)}",
        metadata=metadata,
    )


def _severity(expectation: Expectation, fraction: float) -> dg.AssetCheckSeverity | None:
    if expectation.error_above is not None and fraction > expectation.error_above:
        return dg.AssetCheckSeverity.ERROR
    if fraction > expectation.warn_above:
        return dg.AssetCheckSeverity.WARN
    return None


def _limits(expectation: Expectation) -> str:
    said = f"warns above {expectation.warn_above:g}"
    if expectation.error_above is not None:
        said += f", errors above {expectation.error_above:g}"
    return said


def _descriptions(spec: PipelineSpec) -> Mapping[str, str]:
    return {
        check_name(e): (
            f"`{e.rule}` ({e.action.value}): the failing rows of the latest run that judged "
            f"rows, and their fraction; {_limits(e)}"
            + (" The quarantine's size is plotted too." if e.shapes_rows else "")
        )
        for e in spec.expectations
    }


def expectation_checks(spec: PipelineSpec) -> dg.AssetChecksDefinition | None:
    """The checks of `spec`'s expectations (None without any)."""
    if not spec.expectations:
        return None
    key = silver_key(spec.id)
    descriptions = _descriptions(spec)

    @dg.multi_asset_check(
        name=f"{key.to_python_identifier()}_expectations",
        specs=[
            dg.AssetCheckSpec(check_name(e), asset=key, description=descriptions[check_name(e)])
            for e in spec.expectations
        ],
        can_subset=True,
    )
    def _checks(
        context: dg.AssetCheckExecutionContext, lake: LakeLayout
    ) -> Iterator[dg.AssetCheckResult]:
        control = lake.control()
        rows = control.read_log(spec.id)
        selected = {check.name for check in context.selected_asset_check_keys}
        quarantines = any(e.action is ExpectationAction.QUARANTINE for e in spec.expectations)
        held = quarantined_rows(control, spec.id) if quarantines else None
        for expectation in spec.expectations:
            if check_name(expectation) in selected:
                quarantine = expectation.action is ExpectationAction.QUARANTINE
                yield expectation_result(spec, expectation, rows, held if quarantine else None)

    return _checks
