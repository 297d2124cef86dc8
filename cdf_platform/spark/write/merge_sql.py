"""The one builder of MERGE statements. Every write that merges into a Delta table (each silver
layout, the event source's tombstones, a consumer's `MergeRows`) supplies its ON condition and
its clauses in order; `merge_statement` assembles them. The target is always `t` and the source
always `s`: the view `cdf_platform_source`, registered by the caller for the write.

Conditions and actions are SQL the caller builds (its identifiers already quoted); a clause
builder adds only the keywords around them, so the statement reads as its layout wrote it.

Example:
    >>> print(
    ...     merge_statement(
    ...         "/lake/silver/orders",
    ...         "t.`id` = s.`id`",
    ...         [
    ...             when_matched("s.`gone`", DELETE),
    ...             when_matched(None, update_set(["`v` = s.`v`"])),
    ...             when_not_matched("NOT s.`gone`", insert_values(["id", "v"])),
    ...         ],
    ...     ).strip()
    ... )
    MERGE INTO delta.`/lake/silver/orders` AS t
            USING cdf_platform_source AS s
            ON t.`id` = s.`id`
            WHEN MATCHED AND s.`gone` THEN DELETE
            WHEN MATCHED THEN UPDATE SET `v` = s.`v`
            WHEN NOT MATCHED AND NOT s.`gone` THEN INSERT (`id`, `v`) VALUES (s.`id`, s.`v`)
"""

from __future__ import annotations

from collections.abc import Sequence

from cdf_platform.core.sql import quote_ident, sql_path

SOURCE_VIEW = "cdf_platform_source"
DELETE = "DELETE"
UPDATE_ALL = "UPDATE SET *"
INSERT_ALL = "INSERT *"


def merge_statement(target: str, on: str, clauses: Sequence[str]) -> str:
    """MERGE INTO the Delta table at `target` (`t`) USING the source view (`s`) ON `on`, with
    `clauses` in the order given (Delta applies the first clause whose condition holds).

    Raises:
        ValueError: no clause (a MERGE that would do nothing is a mistake of its caller).
    """
    if not clauses:
        raise ValueError("a MERGE needs at least one WHEN clause")
    body = "\n        ".join(clauses)
    return f"""
        MERGE INTO {sql_path(target)} AS t
        USING {SOURCE_VIEW} AS s
        ON {on}
        {body}
    """


def _when(match: str, condition: str | None, action: str) -> str:
    guard = "" if condition is None else f" AND {condition}"
    return f"WHEN {match}{guard} THEN {action}"


def when_matched(condition: str | None, action: str) -> str:
    """The clause for a target row the source matches (and `condition`, if any, holds for):
    `action` is `DELETE` or an `update_set`."""
    return _when("MATCHED", condition, action)


def when_not_matched(condition: str | None, action: str) -> str:
    """The clause for a source row no target row matches: `action` is an `insert_values` or
    `INSERT_ALL`."""
    return _when("NOT MATCHED", condition, action)


def when_not_matched_by_source(condition: str | None, action: str) -> str:
    """The clause for a target row no source row matches: `action` is `DELETE` or an
    `update_set` over `t` alone."""
    return _when("NOT MATCHED BY SOURCE", condition, action)


def update_set(assignments: Sequence[str]) -> str:
    """UPDATE SET of `assignments` (each `<quoted column> = <SQL>`), in order."""
    return f"UPDATE SET {', '.join(assignments)}"


def insert_values(columns: Sequence[str], values: Sequence[str] | None = None) -> str:
    """INSERT of `columns` (unquoted names) with `values` (SQL, one per column; by default each
    column of the source row `s`).

    Raises:
        ValueError: `values` does not hold one value per column.
    """
    if values is None:
        values = [f"s.{quote_ident(c)}" for c in columns]
    if len(values) != len(columns):
        raise ValueError(f"{len(columns)} columns but {len(values)} values to insert")
    names = ", ".join(quote_ident(c) for c in columns)
    return f"INSERT ({names}) VALUES ({', '.join(values)})"
