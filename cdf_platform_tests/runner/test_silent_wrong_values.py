"""Histories that once left silver silently wrong, each checked by hand on real Spark and Delta:
an UPDATE of a key column, a soft-deleted row coming back through an update under
`ignore_null_updates`, a retired column on SCD2's current versions, and a rebuild's reconcile
over a soft-deleted row under `ignore_null_updates`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.planning.plan import RunMode
from cdf_platform.run import PipelineRunner
from cdf_platform.state.control import ControlTable
from cdf_platform_tests.bronze import (
    control_for,
    drop_column,
    live_rows,
    make_bronze,
    rows,
    spec_for,
    sql,
)


def _run(spark: SparkSession, spec: PipelineSpec, control: ControlTable, **kw: Any) -> RunMode:
    return PipelineRunner.on(control, lambda: spark).run(spec, **kw).mode


def _pipelines(lake: Path, **fields: Any) -> list[PipelineSpec]:
    """A hard and a soft pipeline of one bronze table (`lake/bronze`)."""
    return [
        spec_for(lake, id=mode, target=str(lake / mode), delete_mode=mode, **fields)
        for mode in ("hard", "soft")
    ]


def _load(
    spark: SparkSession,
    specs: list[PipelineSpec],
    control: ControlTable,
    column: str,
    values: str,
) -> None:
    """Bronze (id, name, amount and `column`, a column definition) holding `values`, loaded by
    each of `specs` (which share it)."""
    spark.sql(
        f"CREATE TABLE delta.`{specs[0].source}` (id BIGINT, name STRING, amount INT, {column}) "
        "USING DELTA TBLPROPERTIES ('delta.enableChangeDataFeed' = 'true')"
    )
    sql(spark, specs[0].source, f"INSERT INTO {{t}} VALUES {values}")
    for spec in specs:
        _run(spark, spec, control)


def _live(spark: SparkSession, spec: PipelineSpec, *columns: str) -> list[tuple[Any, ...]]:
    return live_rows(spark, spec.target, *columns)


def test_an_update_of_a_key_column_deletes_the_old_key(spark: SparkSession, lake: Path) -> None:
    """`UPDATE SET id = 23 WHERE id = 3`: the change feed holds a preimage of 3 and a
    postimage of 23 and no delete; key 3 has left bronze, so it leaves silver (soft: a
    tombstone stamped with the commit), in both delete modes."""
    hard, soft = _pipelines(lake)
    control = control_for(lake)
    make_bronze(spark, hard.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    for spec in (hard, soft):
        assert _run(spark, spec, control) is RunMode.INITIAL_LOAD

    sql(spark, hard.source, "UPDATE {t} SET amount = 21 WHERE id = 2")
    sql(spark, hard.source, "UPDATE {t} SET id = 23 WHERE id = 3")
    for spec in (hard, soft):
        assert _run(spark, spec, control) is RunMode.INCREMENTAL
        assert _live(spark, spec, "id", "amount") == [(1, 10), (2, 21), (23, 30)]
    assert rows(spark, soft.target, "id", "_is_deleted", "_source_commit_version") == [
        (1, False, 1),
        (2, False, 2),
        (3, True, 3),
        (23, False, 3),
    ]

    # Two keys swapped in one commit: each appears as a preimage and as a postimage.
    sql(spark, hard.source, "UPDATE {t} SET id = CASE id WHEN 1 THEN 2 ELSE 1 END WHERE id < 3")
    for spec in (hard, soft):
        _run(spark, spec, control)
        assert _live(spark, spec, "id", "amount") == [(1, 21), (2, 10), (23, 30)]


def test_a_soft_deleted_row_returning_through_an_update_starts_from_the_source_row(
    spark: SparkSession, lake: Path
) -> None:
    """`where: shown`, `ignore_null_updates`: row 3 leaves the filter (soft: tombstoned), then
    returns through an UPDATE that sets amount to NULL. A soft-deleted row is absent for
    every rule about values, so it returns with NULL, as the hard pipeline's insert does."""
    hard, soft = _pipelines(lake, where="shown", ignore_null_updates=True)
    control = control_for(lake)
    _load(
        spark, [hard, soft], control, "shown BOOLEAN", "(1, 'ada', 10, true), (3, 'cy', 30, true)"
    )

    sql(spark, hard.source, "UPDATE {t} SET shown = false WHERE id = 3")
    for spec in (hard, soft):
        _run(spark, spec, control)
        assert _live(spark, spec, "id", "amount") == [(1, 10)]

    sql(spark, hard.source, "UPDATE {t} SET shown = true, amount = NULL WHERE id = 3")
    sql(spark, hard.source, "UPDATE {t} SET name = NULL WHERE id = 1")
    for spec in (hard, soft):
        _run(spark, spec, control)
        # Row 1's NULL update keeps silver's name; row 3 starts over from the source row.
        assert _live(spark, spec, "id", "name", "amount") == [(1, "ada", 10), (3, "cy", None)]

    # A rebuild reconciles the same way: the snapshot's NULL keeps a live row's value only.
    sql(spark, hard.source, "UPDATE {t} SET shown = false WHERE id = 1")
    for spec in (hard, soft):
        _run(spark, spec, control)
    sql(spark, hard.source, "UPDATE {t} SET shown = true, amount = NULL WHERE id = 1")
    for spec in (hard, soft):
        assert _run(spark, spec, control, force_rebuild=True) is RunMode.REBUILD
        assert _live(spark, spec, "id", "name", "amount") == [(1, None, None), (3, "cy", None)]


@pytest.mark.parametrize("tracked", [None, ["name"]], ids=["all-tracked", "name-tracked"])
def test_scd2_current_versions_hold_null_in_a_retired_column(
    spark: SparkSession, lake: Path, tracked: list[str] | None
) -> None:
    """SCD2: after bronze drops `amount` (a rebuild), every current version holds NULL there,
    whether it was opened before the drop or after; versions closed before it keep what they
    held."""
    spec = spec_for(
        lake,
        history="scd2",
        track_history_columns=tracked,
        fallback_mode="SNAPSHOT_REBUILD",
    )
    control = control_for(lake)
    make_bronze(spark, spec.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30)])
    _run(spark, spec, control)
    sql(spark, spec.source, "UPDATE {t} SET name = 'ada2', amount = 11 WHERE id = 1")
    _run(spark, spec, control)
    drop_column(spark, spec.source, "amount")
    assert _run(spark, spec, control) is RunMode.REBUILD
    sql(spark, spec.source, "UPDATE {t} SET name = 'bob2' WHERE id = 2")
    assert _run(spark, spec, control) is RunMode.INCREMENTAL

    current = rows(spark, spec.target, "id", "name", "amount", "__end_at")
    assert [(i, n, a) for i, n, a, end in current if end is None] == [
        (1, "ada2", None),
        (2, "bob2", None),
        (3, "cy", None),
    ]
    # ada's first version closed before the drop; bob's after it, holding NULL by then.
    closed = sorted((i, n, a) for i, n, a, end in current if end is not None)
    assert closed == [(1, "ada", 10), (2, "bob", None)]


def test_a_delete_applies_under_sequence_by_with_ignore_null_updates(
    spark: SparkSession, lake: Path
) -> None:
    """`sequence_by` with `ignore_null_updates`: the collapsed delete carries its own sequence
    value (a delete's values are not carried, but its order is), so it is newer than the row
    it removes, in both delete modes."""
    hard, soft = _pipelines(lake, sequence_by="seq", ignore_null_updates=True)
    control = control_for(lake)
    _load(spark, [hard, soft], control, "seq BIGINT", "(1, 'ada', 10, 1), (2, 'bob', 20, 1)")
    sql(spark, hard.source, "UPDATE {t} SET amount = NULL, seq = 2 WHERE id = 1")
    sql(spark, hard.source, "DELETE FROM {t} WHERE id = 2")
    for spec in (hard, soft):
        assert _run(spark, spec, control) is RunMode.INCREMENTAL
        assert _live(spark, spec, "id", "amount", "seq") == [(1, 10, 2)]
    assert rows(spark, soft.target, "id", "_is_deleted") == [(1, False), (2, True)]


def test_a_column_silver_no_longer_takes_is_nulled_on_every_row_a_run_writes(
    spark: SparkSession, lake: Path
) -> None:
    """A column the pipeline stops taking (`exclude_columns` grows) forward only
    (`on_spec_change: forward_only`) is retired: every row a run writes, updated or
    soft-deleted, holds NULL there; rows no run touched (a tombstone among them) keep their
    value until a rebuild clears them all. (Reconciled, the default, clears them at once:
    test_spec_changes.)"""
    hard, soft = _pipelines(lake)
    control = control_for(lake)
    make_bronze(spark, hard.source, [(1, "ada", 10), (2, "bob", 20), (3, "cy", 30), (4, "dee", 40)])
    for spec in (hard, soft):
        _run(spark, spec, control)
    sql(spark, hard.source, "DELETE FROM {t} WHERE id = 4")
    for spec in (hard, soft):
        _run(spark, spec, control)
    narrowed = [
        spec.model_copy(update={"exclude_columns": ["amount"], "on_spec_change": "forward_only"})
        for spec in (hard, soft)
    ]
    sql(spark, hard.source, "UPDATE {t} SET name = 'ada2' WHERE id = 1")
    sql(spark, hard.source, "DELETE FROM {t} WHERE id = 2")
    for spec in narrowed:
        _run(spark, spec, control)
        assert _live(spark, spec, "id", "name", "amount") == [(1, "ada2", None), (3, "cy", 30)]
    assert rows(spark, soft.target, "id", "amount", "_is_deleted") == [
        (1, None, False),
        (2, None, True),
        (3, 30, False),
        (4, 40, True),
    ]
    for spec in narrowed:
        _run(spark, spec, control, force_rebuild=True)
        assert set(rows(spark, spec.target, "amount")) == {(None,)}


def test_a_rebuild_revives_a_tombstone_whose_key_is_back_with_the_same_values(
    spark: SparkSession, lake: Path
) -> None:
    """Soft deletes: a key deleted, then inserted again with the very values the tombstone
    holds, is live after a rebuild (nothing differs but the tombstone itself)."""
    soft = _pipelines(lake)[1]
    control = control_for(lake)
    make_bronze(spark, soft.source, [(1, "ada", 10), (2, "bob", 20)])
    _run(spark, soft, control)
    sql(spark, soft.source, "DELETE FROM {t} WHERE id = 2")
    _run(spark, soft, control)
    sql(spark, soft.source, "INSERT INTO {t} VALUES (2, 'bob', 20)")
    assert _run(spark, soft, control, force_rebuild=True) is RunMode.REBUILD
    assert rows(spark, soft.target, "id", "amount", "_is_deleted", "_deleted_at") == [
        (1, 10, False, None),
        (2, 20, False, None),
    ]
