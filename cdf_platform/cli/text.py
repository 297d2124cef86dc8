"""What `cdf-platform` prints for a person: the status table (hours with 2 decimals, problems,
forward-only spec edits and foreign writes below it), a verification, a run's figures."""

from __future__ import annotations

import json
import sys
from typing import Any

from cdf_platform.planning.run_result import RunResult

STATUS_COLUMNS = (
    ("pipeline_id", "pipeline"),
    ("state", "state"),
    ("watermark", "watermark"),
    ("latest_version", "latest"),
    ("version_lag", "lag (versions)"),
    ("data_version_lag", "lag (data versions)"),
    ("lag_hours", "lag (h)"),
    ("earliest_replayable_version", "earliest replayable"),
    ("headroom_hours", "headroom (h)"),
    ("spec_state", "spec"),
)


# Hours as every other screen writes them (the checks, the overview): 2 decimals.
HOURS_COLUMNS = frozenset({"lag_hours", "headroom_hours"})


def _cell(name: str, value: Any) -> str:
    if value is None:
        return "-"
    return f"{float(value):.2f}" if name in HOURS_COLUMNS else str(value)


def render_status_table(statuses: list[dict[str, Any]]) -> str:
    """A plain-text table of status rows, one line per pipeline, problems listed below; hours
    with 2 decimals."""
    header = [title for _, title in STATUS_COLUMNS]
    body = [[_cell(name, row[name]) for name, _ in STATUS_COLUMNS] for row in statuses]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in [header, *body]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for row in statuses:
        if row["problem"]:
            lines.append(f"\n{row['pipeline_id']}: {row['problem']}")
        elif row.get("spec_state") == "FORWARD_ONLY":
            fields = ", ".join(row["spec_changed_fields"])
            lines.append(
                f"\n{row['pipeline_id']}: spec edits of {fields} taken forward only: rows "
                f"written before keep the previous spec's values until `cdf-platform rebuild "
                f"{row['pipeline_id']}`"
            )
    for row in statuses:
        if row.get("foreign_writes"):
            lines.append(f"\n{row['pipeline_id']}: {_foreign_writes_line(row)}")
    return "\n".join(lines)


def _foreign_writes_line(row: dict[str, Any]) -> str:
    """`foreign writes: v12 UPDATE, v13 DELETE (since rebuild v5)` and what to do."""
    pipeline = row["pipeline_id"]
    return (
        f"foreign writes: {row['foreign_writes_summary']} (since "
        f"{row['foreign_writes_baseline']}): silver may differ from its spec applied to bronze; "
        f"`cdf-platform verify --pipeline {pipeline}` names the keys (`--repair` reconciles "
        f"them), or `cdf-platform rebuild {pipeline}` reconciles all of silver"
    )


def render_verification(result: dict[str, Any]) -> str:
    """One verification as text: the outcome and versions, then each named differing key."""
    lines = [
        f"{result['pipeline_id']}: {result['outcome']} (bronze version {result['bronze_version']}"
        f", silver version {result['silver_version']}; {result['differing_keys']} differing "
        f"key(s) of {result['expected_rows']} expected rows)"
    ]
    lines += [f"  {key}" for key in result["sample_keys"]]
    if result["repaired_silver_version"] is not None:
        lines.append(f"  repaired: silver version {result['repaired_silver_version']}")
    if result["message"]:
        lines.append(f"  note: {result['message']}")
    return "\n".join(lines)


def print_result(result: RunResult, as_json: bool) -> None:
    """A run's figures on standard output: one JSON object, or a line per figure that has a
    value."""
    if as_json:
        sys.stdout.write(json.dumps(result.as_metadata(), default=str) + "\n")
        return
    figures = result.as_metadata()
    width = max(len(k) for k in figures)
    for key, value in figures.items():
        if value is not None:
            sys.stdout.write(f"{key:<{width}}  {value}\n")
