"""Delta's retention table properties and the interval text they are written in.

Example:
    >>> parse_interval("interval 7 days")
    datetime.timedelta(days=7)
"""

from __future__ import annotations

import re
from datetime import timedelta

DELETED_FILE_RETENTION_KEY = "delta.deletedFileRetentionDuration"
LOG_RETENTION_KEY = "delta.logRetentionDuration"
# Delta 4.4 defaults (DeltaConfigs.TOMBSTONE_RETENTION, DeltaConfigs.LOG_RETENTION).
DEFAULT_DELETED_FILE_RETENTION = timedelta(weeks=1)
DEFAULT_LOG_RETENTION = timedelta(days=30)

_INTERVAL_UNITS = {
    "week": timedelta(weeks=1),
    "day": timedelta(days=1),
    "hour": timedelta(hours=1),
    "minute": timedelta(minutes=1),
    "second": timedelta(seconds=1),
    "millisecond": timedelta(milliseconds=1),
    "microsecond": timedelta(microseconds=1),
}
_INTERVAL_TERM = re.compile(r"\s*([+-]?\d+(?:\.\d+)?)\s*([a-z]+)\s*")


def parse_interval(text: str) -> timedelta:
    """Parse a Delta interval property ("interval 7 days", "168 hours", "1 week 2 days").

    Follows DeltaConfigs.parseCalendarInterval: case-insensitive, the `interval` keyword is
    optional, units may be singular or plural. Months and years are refused, as Delta refuses
    them for retention properties (their length is not fixed).

    Raises:
        ValueError: the text is not such an interval.
    """
    rest = text.strip().lower()
    if rest.startswith("interval"):
        rest = rest[len("interval") :]
    total, position = timedelta(), 0
    for match in _INTERVAL_TERM.finditer(rest):
        if match.start() != position:
            break
        unit = match.group(2).removesuffix("s")
        if unit in ("month", "year"):
            raise ValueError(f"interval {text!r}: months and years are not accepted by Delta")
        if unit not in _INTERVAL_UNITS:
            raise ValueError(f"interval {text!r}: unknown unit {match.group(2)!r}")
        total += _INTERVAL_UNITS[unit] * float(match.group(1))
        position = match.end()
    if position == 0 or position != len(rest):
        raise ValueError(f"not a Delta interval: {text!r}")
    return total
