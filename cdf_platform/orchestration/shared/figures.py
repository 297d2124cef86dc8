"""Metadata as the Dagster UI shows it: figures it plots, and text it only shows.

The UI plots every int and float metadata value of an asset check's evaluations on the check's
page (and of an asset's materializations on its Plots tab); any other type is shown, not
plotted. So a value is a number only when an operator watches it move: lag in versions and
hours, headroom in hours, the earliest replayable version, the watermark. A limit (constant per
pipeline) or a counter that only grows (bronze's latest version) is text, so it does not draw a
flat line or a ramp beside the figures that matter. Hours are rounded to 2 decimals.

A plotted figure is numeric on every evaluation (a key missing or of another type on some
evaluations leaves holes in its plot), so a figure that does not exist at an evaluation is
recorded as `UNKNOWN` (-1), never dropped:

- `watermark` of a pipeline that never ran (silver does not exist yet);
- every bronze figure (lag, earliest replayable version) while the bronze table does not exist.

Versions and lag are never negative otherwise, so -1 cannot be mistaken for a real value. Hours
are never a placeholder: a -1 on an hours axis reads as a negative duration. `headroom_hours`
is the one figure every view gives (`PipelineStatus.headroom_hours`: `status`, the checks,
`platform/pipelines`): while nothing waits to be replayed (caught up) the retention horizon,
the headroom bronze's next commit will start with; 0 once the window is lost; and left out (a
hole) where there is none (never ran, no bronze table), as `status --json` says null and the
tables `-`. An absent text value reads "none" (the UI shows a null value as "null").
"""

import dagster as dg

UNKNOWN = -1
"""Sentinel of a plotted figure that does not exist at this evaluation (see the module
docstring)."""

NONE = "none"
"""The text of an absent value."""

DECIMALS = 2
"""Decimals of a plotted duration (hours or seconds)."""


def count(value: int | None) -> dg.IntMetadataValue:
    """A plotted version number or count, `UNKNOWN` when absent."""
    return dg.IntMetadataValue(UNKNOWN if value is None else int(value))


def hours(value: float | None) -> dg.FloatMetadataValue:
    """A plotted duration in hours (2 decimals), `UNKNOWN` when absent (lag only: headroom is
    left out instead, see the module docstring)."""
    return dg.FloatMetadataValue(float(UNKNOWN) if value is None else duration(value))


def duration(value: float) -> float:
    """A duration rounded for display (2 decimals)."""
    return round(float(value), DECIMALS)


def text(value: object) -> dg.TextMetadataValue:
    """A label or a number that is not plotted (a counter), "none" when absent."""
    return dg.TextMetadataValue(NONE if value is None else str(value))


def limit(comparison: str, value: float, field: str) -> dg.TextMetadataValue:
    """A pipeline's limit as text, e.g. "fails above 24 h (max_allowed_lag_hours)"."""
    return dg.TextMetadataValue(f"{comparison} {value:g} h ({field})")
