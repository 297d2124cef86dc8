"""How a delete reaches silver, one class per delete mode, chosen once per layout
(`deletes_of`): a hard delete removes the row; a soft one keeps it as a tombstone
(`_is_deleted`, `_deleted_at`), which an insert or an update makes live again. The MERGEs of
`cdf_platform.spark.write.merge` take the delete parts of their clauses from here and never ask
which mode they write; `cdf_platform.spark.write.merge_sql` assembles them.

Example:
    >>> soft = SilverLayout(["id"], ["id", "v"], DeleteMode.SOFT)
    >>> deletes_of(soft).live()
    ['_is_deleted = false', '_deleted_at = CAST(NULL AS TIMESTAMP)']
    >>> hard = SilverLayout(["id"], ["id", "v"], DeleteMode.HARD)
    >>> deletes_of(hard).removal(hard, at="s.ts", version="s.v")
    'DELETE'
"""

from __future__ import annotations

from cdf_platform.core.spec.modes import DeleteMode
from cdf_platform.core.sql import quote_ident
from cdf_platform.spark.table.silver_layout import (
    DELETED_AT,
    IS_DELETED,
    SOURCE_VERSION,
    SilverLayout,
)
from cdf_platform.spark.write.merge_sql import (
    DELETE,
    update_set,
    when_not_matched_by_source,
)

_NULL_TIMESTAMP = "CAST(NULL AS TIMESTAMP)"


class SilverDeletes:
    """How one delete mode writes: the assignments that keep a row live, what it adds to an
    inserted row, the action that deletes a row, and the delete parts of the incremental and
    the reconcile MERGE."""

    def live(self) -> list[str]:
        """The assignments an insert or an update writes so that the row is live."""
        raise NotImplementedError

    def new_row(self) -> list[tuple[str, str]]:
        """(silver column, SQL value) the mode adds to a row inserted from `s`."""
        raise NotImplementedError

    def removal(
        self, layout: SilverLayout, *, at: str, version: str, sequence: str | None = None
    ) -> str:
        """The MERGE action that deletes the matched row `t`, at `at` (SQL: its `_deleted_at`),
        by bronze version `version` (SQL), with the delete's own `sequence` value (SQL; None:
        the row keeps its own, see `tombstone`)."""
        raise NotImplementedError

    def quiet(self, newer: str, unchanged: str) -> tuple[str, str]:
        """The conditions (delete, update) of a quiet change set (an event log's fold, some of
        which silver took before) given `newer` (the change is newer than `t`) and `unchanged`
        (an update from `s` would leave `t`'s values as they are): a delete of a row already
        deleted and an update that leaves a live row as it is write nothing."""
        raise NotImplementedError

    def truncation(
        self, layout: SilverLayout, older: str, *, at: str, version: str, sequence: str
    ) -> str:
        """The clause removing the rows no change reaches for which `older` holds (an event
        log's truncate at `sequence`, SQL, committed at bronze `version` at `at`)."""
        raise NotImplementedError

    def reconcile_differs(self, differs: str) -> str:
        """`differs` (a snapshot's row differs from `t`), and whatever else makes the
        reconcile MERGE rewrite a row the snapshot holds."""
        raise NotImplementedError

    def reconcile_gone(self, layout: SilverLayout, *, stamp: str, at: str, restamp: str) -> str:
        """The reconcile MERGE's clause for a row whose key the snapshot no longer holds
        (`stamp`: the snapshot's version, SQL; `at`: the delete time, SQL; `restamp`: `t` is
        stamped past the snapshot)."""
        raise NotImplementedError


class HardDeletes(SilverDeletes):
    """`delete_mode: hard`: a deleted key's row leaves silver."""

    def live(self) -> list[str]:
        return []

    def new_row(self) -> list[tuple[str, str]]:
        return []

    def removal(
        self, layout: SilverLayout, *, at: str, version: str, sequence: str | None = None
    ) -> str:
        return DELETE

    def quiet(self, newer: str, unchanged: str) -> tuple[str, str]:
        return newer, f"{newer} AND NOT (TRUE AND {unchanged})"

    def truncation(
        self, layout: SilverLayout, older: str, *, at: str, version: str, sequence: str
    ) -> str:
        return when_not_matched_by_source(older, DELETE)

    def reconcile_differs(self, differs: str) -> str:
        return differs

    def reconcile_gone(self, layout: SilverLayout, *, stamp: str, at: str, restamp: str) -> str:
        return when_not_matched_by_source(None, DELETE)


class SoftDeletes(SilverDeletes):
    """`delete_mode: soft`: a deleted key's row stays, marked `_is_deleted` with
    `_deleted_at`; an insert or an update of the key makes it live again."""

    def live(self) -> list[str]:
        return [f"{IS_DELETED} = false", f"{DELETED_AT} = {_NULL_TIMESTAMP}"]

    def new_row(self) -> list[tuple[str, str]]:
        return [(IS_DELETED, "false"), (DELETED_AT, _NULL_TIMESTAMP)]

    def removal(
        self, layout: SilverLayout, *, at: str, version: str, sequence: str | None = None
    ) -> str:
        return update_set(tombstone(layout, at=at, version=version, sequence=sequence))

    def quiet(self, newer: str, unchanged: str) -> tuple[str, str]:
        live = f"NOT t.{IS_DELETED}"
        return f"{newer} AND {live}", f"{newer} AND NOT ({live} AND {unchanged})"

    def truncation(
        self, layout: SilverLayout, older: str, *, at: str, version: str, sequence: str
    ) -> str:
        marks = tombstone(layout, at=at, version=version, sequence=sequence)
        return when_not_matched_by_source(f"NOT t.{IS_DELETED} AND {older}", update_set(marks))

    def reconcile_differs(self, differs: str) -> str:
        # A tombstone whose key the snapshot holds comes back, whatever its values.
        return f"t.{IS_DELETED} OR {differs}"

    def reconcile_gone(self, layout: SilverLayout, *, stamp: str, at: str, restamp: str) -> str:
        # A row already soft-deleted keeps its delete time; it is rewritten only to re-stamp it
        # or to clear a retired column (a later re-insert would otherwise bring that value back).
        stale = f"NOT t.{IS_DELETED} OR {restamp} OR {layout.holds_retired_value()}"
        kept_at = f"CASE WHEN t.{IS_DELETED} THEN t.{DELETED_AT} ELSE {at} END"
        gone = update_set(tombstone(layout, at=kept_at, version=stamp))
        return when_not_matched_by_source(f"({stale})", gone)


def tombstone(
    layout: SilverLayout, *, at: str, version: str, sequence: str | None = None
) -> list[str]:
    """The assignments of a soft delete: values stay (a delete never rewrites them) but the
    retired columns, which no current row holds, and with `sequence` (SQL: an event source's
    delete or truncate, which carries its own sequence value, where a change feed's delete
    carries the deleted row's) the `sequence_by` column, which takes that value: an event older
    than the delete, arriving later, must find the key deleted."""
    marks = [f"{IS_DELETED} = true", f"{DELETED_AT} = {at}", f"{SOURCE_VERSION} = {version}"]
    if sequence is not None and layout.sequence_by is not None:
        marks.append(f"{quote_ident(layout.sequence_by)} = {sequence}")
    return [*marks, *layout.retired_nulls()]


_BY_MODE: dict[DeleteMode, SilverDeletes] = {
    DeleteMode.HARD: HardDeletes(),
    DeleteMode.SOFT: SoftDeletes(),
}


def deletes_of(layout: SilverLayout) -> SilverDeletes:
    """The one choice of how `layout`'s deletes are written (its delete mode's class)."""
    return _BY_MODE[layout.delete_mode]
