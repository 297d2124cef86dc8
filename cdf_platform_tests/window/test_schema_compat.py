"""Type widening in the JVM-free planner: a widening Delta allows is additive (silver follows it)
but still a point a batch change-feed read cannot cross; every other type change is
non-additive."""

from __future__ import annotations

import pytest

from cdf_platform.deltalog.actions import TableMetadata
from cdf_platform.window.schema_compat import (
    TypeWidening,
    compare_column_types,
    compare_schemas,
    is_widening,
    non_additive_changes,
)


def _metadata(**columns: object) -> TableMetadata:
    fields = [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in columns.items()]
    return TableMetadata("id", {"type": "struct", "fields": fields}, (), {})


def _struct(**fields: object) -> dict[str, object]:
    return dict(_metadata(**fields).schema)


# Delta 4.x TypeWidening.isTypeChangeSupported, case by case (schema-JSON type names).
@pytest.mark.parametrize(
    ("old", "new", "allowed"),
    [
        ("byte", "short", True),
        ("short", "integer", True),
        ("integer", "long", True),
        ("byte", "long", True),
        ("long", "integer", False),
        ("float", "double", True),
        ("double", "float", False),
        ("date", "timestamp_ntz", True),
        ("date", "timestamp", False),
        ("integer", "double", True),
        ("long", "double", False),
        ("integer", "decimal(10,0)", True),
        ("integer", "decimal(9,0)", False),
        ("byte", "decimal(5,0)", False),  # byte, short and int all need (10, 0)
        ("long", "decimal(20,0)", True),
        ("long", "decimal(21,2)", False),
        ("decimal(10,2)", "decimal(12,2)", True),
        ("decimal(10,2)", "decimal(12,4)", True),
        ("decimal(10,2)", "decimal(11,4)", False),  # scale up needs as much precision
        ("decimal(10,2)", "decimal(10,1)", False),
        ("string", "integer", False),
        ("integer", "string", False),
        ("long", "long", False),
    ],
)
def test_widenings_follow_delta_type_widening(old: str, new: str, allowed: bool) -> None:
    assert is_widening(old, new) is allowed


def test_a_widening_is_additive_and_other_type_changes_are_not() -> None:
    before = _metadata(id="long", qty="integer", price="decimal(10,2)")
    widened = _metadata(id="long", qty="long", price="decimal(12,2)")
    assert non_additive_changes(before, widened) == []
    found = compare_schemas(before, widened)
    assert [str(w) for w in found.widenings] == [
        "column qty widened int -> bigint",
        "column price widened decimal(10,2) -> decimal(12,2)",
    ]
    # Silver follows it, but a batch CDF read across it is refused (delta-spark 4.4).
    assert found.blocks_replay is not None and "column qty widened int -> bigint" in (
        found.blocks_replay
    )

    assert non_additive_changes(widened, before) == [
        "column qty changed type from bigint to int",
        "column price changed type from decimal(12,2) to decimal(10,2)",
    ]
    retyped = _metadata(id="long", qty="string", price="decimal(10,2)")
    assert non_additive_changes(before, retyped) == ["column qty changed type from int to string"]
    assert compare_schemas(before, retyped).widenings == ()
    assert compare_schemas(before, before).blocks_replay is None


def test_nested_widenings_are_found_by_path() -> None:
    before = _metadata(
        s=_struct(a="short"),
        arr={"type": "array", "elementType": "integer", "containsNull": True},
        m={"type": "map", "keyType": "string", "valueType": "float", "valueContainsNull": True},
    )
    after = _metadata(
        s=_struct(a="integer"),
        arr={"type": "array", "elementType": "long", "containsNull": True},
        m={"type": "map", "keyType": "string", "valueType": "double", "valueContainsNull": True},
    )
    assert non_additive_changes(before, after) == []
    assert compare_schemas(before, after).widenings == (
        TypeWidening(("s", "a"), "smallint", "int"),
        TypeWidening(("arr", "element"), "int", "bigint"),
        TypeWidening(("m", "value"), "float", "double"),
    )
    assert non_additive_changes(after, before) == [
        "column s.a changed type from int to smallint",
        "column arr.element changed type from bigint to int",
        "column m.value changed type from double to float",
    ]


def test_silver_column_comparison_ignores_nullability_and_refuses_nested_additions() -> None:
    silver = _struct(a="integer")
    bronze = {"type": "struct", "fields": [{"name": "a", "type": "long", "nullable": False}]}
    found = compare_column_types(silver, bronze, "s")
    assert (found.non_additive, found.widenings) == (
        (),
        (TypeWidening(("s", "a"), "int", "bigint"),),
    )
    grown = _struct(a="integer", b="string")
    assert compare_column_types(silver, grown, "s").non_additive == ("field s.b is new",)
    assert compare_column_types("long", "integer", "qty").non_additive == (
        "column qty changed type from bigint to int",
    )
