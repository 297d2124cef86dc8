"""Numeric check metadata that the Dagster UI can plot on every evaluation.

The UI plots a metadata key of an asset check over time only while it is numeric: a key that is
missing or null on some evaluations leaves holes. A figure that does not exist at an evaluation
is therefore recorded as `UNKNOWN` (-1), never dropped:

- `watermark` of a pipeline that never ran (silver does not exist yet);
- every bronze figure (latest version, lag, earliest replayable version) while the bronze table
  does not exist.

Versions and lag are never negative otherwise, so -1 cannot be mistaken for a real value.
"""

import dagster as dg

from cdf_platform.planning.status import PipelineStatus

UNKNOWN = -1
"""Sentinel of a figure that does not exist at this evaluation (see the module docstring)."""


def count(value: int | None) -> dg.IntMetadataValue:
    """A version number or count, `UNKNOWN` when absent."""
    return dg.IntMetadataValue(UNKNOWN if value is None else int(value))


def hours(value: float | None) -> dg.FloatMetadataValue:
    """A duration in hours (3 decimals), `UNKNOWN` when absent."""
    return dg.FloatMetadataValue(float(UNKNOWN) if value is None else round(float(value), 3))


def flag(value: bool) -> dg.IntMetadataValue:
    """A yes/no figure as 1/0, so it plots next to the others."""
    return dg.IntMetadataValue(1 if value else 0)


def text(value: str | None) -> dg.TextMetadataValue:
    """A label, "NONE" when absent."""
    return dg.TextMetadataValue(value if value is not None else "NONE")


def headroom_hours(status: PipelineStatus) -> float | None:
    """The status's headroom, or the retention horizon when nothing waits to be replayed;
    None when bronze is missing.

    The engine reports no headroom while nothing waits to be replayed (caught up, or never ran:
    the initial load reads a snapshot), since the clock only starts with the next commit. Its
    deadline is then at least the retention horizon away (the smaller of bronze's
    `delta.deletedFileRetentionDuration` and `delta.logRetentionDuration`), so that is the
    headroom the check plots.
    """
    if status.headroom_hours is not None:
        return status.headroom_hours
    return status.retention_horizon_hours
