"""The one MERGE builder: the statement every layout's write runs, assembled from its clauses
(the writes themselves run it against real Delta tables in the runner and modeling tests)."""

from __future__ import annotations

import pytest

from cdf_platform.spark.write.merge_sql import (
    DELETE,
    INSERT_ALL,
    UPDATE_ALL,
    insert_values,
    merge_statement,
    update_set,
    when_matched,
    when_not_matched,
    when_not_matched_by_source,
)


def _lines(sql: str) -> list[str]:
    return [line.strip() for line in sql.strip().splitlines()]


def test_a_statement_holds_its_clauses_in_the_order_given() -> None:
    sql = merge_statement(
        "/lake/silver/or`ders",
        "t.`id` = s.`id`",
        [
            when_matched("s.`op` = 'delete'", DELETE),
            when_matched(None, update_set(["`v` = s.`v`", "`n` = t.`n` + 1"])),
            when_not_matched("NOT s.`gone`", insert_values(["id", "v"])),
            when_not_matched(None, INSERT_ALL),
            when_not_matched_by_source("t.`v` IS NULL", UPDATE_ALL),
            when_not_matched_by_source(None, DELETE),
        ],
    )
    assert _lines(sql) == [
        "MERGE INTO delta.`/lake/silver/or``ders` AS t",
        "USING cdf_platform_source AS s",
        "ON t.`id` = s.`id`",
        "WHEN MATCHED AND s.`op` = 'delete' THEN DELETE",
        "WHEN MATCHED THEN UPDATE SET `v` = s.`v`, `n` = t.`n` + 1",
        "WHEN NOT MATCHED AND NOT s.`gone` THEN INSERT (`id`, `v`) VALUES (s.`id`, s.`v`)",
        "WHEN NOT MATCHED THEN INSERT *",
        "WHEN NOT MATCHED BY SOURCE AND t.`v` IS NULL THEN UPDATE SET *",
        "WHEN NOT MATCHED BY SOURCE THEN DELETE",
    ]


def test_an_insert_takes_the_values_given_or_the_source_row_s() -> None:
    assert insert_values(["a`b", "c"], ["1", "NULL"]) == "INSERT (`a``b`, `c`) VALUES (1, NULL)"
    assert insert_values(["a`b"]) == "INSERT (`a``b`) VALUES (s.`a``b`)"


def test_a_statement_without_clauses_or_an_insert_short_of_values_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one WHEN clause"):
        merge_statement("/lake/t", "TRUE", [])
    with pytest.raises(ValueError, match="2 columns but 1 values"):
        insert_values(["a", "b"], ["1"])
