"""What an edit of a pipeline's spec since silver was written asks of the next run
(docs/design.md section 3a): how the spec differs from the one silver records, and whether the
run rewrites silver (`SpecChanged`), cannot follow (`SpecChangeRefused`, blocking), or takes the
edit forward only.

Example:
    >>> change, forward_only = spec_change(spec, silver, recorded, current)  # doctest: +SKIP
    >>> spec_problem(spec, change, forward_only)  # doctest: +SKIP
    SpecChanged('where changed: the next run reconciles silver ...')
"""

from __future__ import annotations

from dataclasses import replace

from cdf_platform.core.errors import CdfPlatformError, SpecChanged, SpecChangeRefused
from cdf_platform.core.spec.modes import FallbackMode, HistoryMode, OnSpecChange
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import SpecChange, compare_spec
from cdf_platform.state.watermark import ForwardOnly, SilverState


def spec_change(
    spec: PipelineSpec,
    silver: SilverState,
    recorded: dict[str, str] | None,
    current: dict[str, str],
) -> tuple[SpecChange | None, ForwardOnly | None]:
    """How `spec` (its record `current`) differs from the spec silver was written under
    (`recorded`), and the edits silver took forward only; neither before the first load."""
    if silver.watermark is None:
        return None, None
    change = compare_spec(recorded, current)
    if change is not None and spec.history is HistoryMode.SCD2 and "sequence_by" in change.fields:
        # An SCD2 history is dated by its sequence column: another one is another shape.
        change = replace(change, fields=tuple(dict.fromkeys((*change.fields, "history"))))
    return change, silver.forward_only


def spec_problem(
    spec: PipelineSpec, change: SpecChange | None, forward_only: ForwardOnly | None
) -> CdfPlatformError | None:
    """What the spec edit `change` (and edits taken forward only before) ask of the next run:
    `SpecChangeRefused` (blocking) where silver cannot follow, `SpecChanged` where a rebuild
    reconciles or reshapes it, None where the edit applies forward only or nothing changed."""
    if change is not None and change.reshapes:
        if spec.on_spec_change is OnSpecChange.FORWARD_ONLY:
            return SpecChangeRefused(
                f"{change.describe()}; `on_spec_change: forward_only` cannot apply a change of "
                "keys, history or delete mode (old and new rows would be of two shapes)",
                pipeline_id=spec.id,
                table=spec.target,
            )
        if spec.history is HistoryMode.SCD2:
            return SpecChangeRefused(
                f"{change.describe()}; an SCD2 history cannot be rewritten into another shape "
                "from one snapshot (its closed versions would be lost)",
                pipeline_id=spec.id,
                table=spec.target,
                action=(
                    f"move the silver table at {spec.target} away (rename its folder, or drop "
                    f"the table) and run `cdf-platform rebuild {spec.id}`, or restore the "
                    "previous spec"
                ),
            )
        return _spec_changed(
            spec, f"{change.describe()}: the next run rewrites silver in the new shape"
        )
    if spec.on_spec_change is not OnSpecChange.RECONCILE:
        return None
    if change is not None:
        return _spec_changed(spec, f"{change.describe()}: the next run reconciles silver")
    if forward_only is not None:
        return _spec_changed(
            spec,
            f"silver took edits of {', '.join(forward_only.fields)} forward only since bronze "
            f"version {forward_only.since}, and the pipeline now asks to reconcile: the next run "
            "reconciles silver",
        )
    return None


def forward_only_after(
    watermark: int | None, change: SpecChange | None, held: ForwardOnly | None
) -> ForwardOnly | None:
    """The forward-only record silver holds once an incremental run at `watermark` takes the
    edit `change` forward only: `held`, widened by the edit's fields (or a new one since
    `watermark`)."""
    if change is None:
        return held
    if held is None:
        return ForwardOnly(watermark, change.fields, change.recorded)
    fields = tuple(dict.fromkeys((*held.fields, *change.fields)))
    return ForwardOnly(held.since, fields, held.from_fingerprint)


def _spec_changed(spec: PipelineSpec, what: str) -> SpecChanged:
    """A pending spec edit of `spec`, with what resolves it: the run itself, or a person's
    rebuild (FAIL_FAST)."""
    rebuild = (
        f"run `cdf-platform rebuild {spec.id}` (or the rebuild job with `override_fail_fast: true`)"
        if spec.fallback_mode is FallbackMode.FAIL_FAST
        else f"run the pipeline (`cdf-platform run {spec.id}`, or its silver asset)"
    )
    return SpecChanged(
        f"{what} from a pinned bronze snapshot under the new spec",
        pipeline_id=spec.id,
        table=spec.target,
        action=(
            f"{rebuild} to bring silver to the new spec from a pinned bronze snapshot; or set "
            "`on_spec_change: forward_only` to apply a `where`/`columns`-like edit to new "
            "changes only; or restore the previous spec"
        ),
    )
