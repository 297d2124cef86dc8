"""Judging rows by a pipeline's expectations (`cdf_platform.core.spec.expectations`).

`judge` gives every row image that `where` kept a `FAILED_RULES` column: the names of the rules
it fails (false or NULL), in the spec's order; other rows (deletes, preimages, rows `where`
dropped) get NULL, and are not counted. `keep_out` then turns a row image failing a `drop` or
`quarantine` rule into the change `where` makes of a row it drops (`FILTERED`: a delete of its
key in silver), and removes the column: from there on, every layout, the rebuild and the event
fold treat it as they treat `where`.

`count_failures` counts judged rows in one aggregation (`ExpectationCounts`; a run judges each
key's latest change, the row silver holds after it: `QualityGate`), and
`refuse_failures` raises `DataQualityError` for a `fail` rule that a row failed, before anything
is written.

Example:
    >>> judged = judge(conformed, spec)  # doctest: +SKIP
    >>> counts = count_failures(judged, spec)  # doctest: +SKIP
    >>> refuse_failures(judged, spec, counts, version=12)  # doctest: +SKIP
    >>> silver_changes = keep_out(judged, spec)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from cdf_platform.core.errors import FIX_SPEC_FIELD, DataQualityError, InvalidPipelineSpec
from cdf_platform.core.spec.expectations import ExpectationAction, ExpectationCounts
from cdf_platform.core.sql import quote_ident
from cdf_platform.spark.read.change_feed import CHANGE_TYPE
from cdf_platform.spark.read.changes import FILTERED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from cdf_platform.core.spec.pipeline_spec import PipelineSpec

FAILED_RULES = "_failed_rules"
"""The column of a judged frame: the names of the expectations a row image fails (empty: it
passes all; NULL: not judged)."""
# The change rows that say what a key holds after its commit (a preimage is dropped anyway).
ROW_IMAGES = ("insert", "update_postimage")
_SAMPLE_KEYS = 5


def judged_columns(frame: DataFrame) -> list[str]:
    """`[FAILED_RULES]` when `frame` was judged, else none: the column a projection to silver's
    data columns keeps for the quality gate."""
    return [FAILED_RULES] if FAILED_RULES in frame.columns else []


def _fails(rule: str) -> Column:
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return ~F.coalesce(F.expr(rule), F.lit(False))


def judge(frame: DataFrame, spec: PipelineSpec) -> DataFrame:
    """`frame` (a conformed change feed) with `FAILED_RULES` on each row image (module doc)."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    names = F.array(*(F.when(_fails(e.rule), F.lit(e.name)) for e in spec.expectations))
    failed = F.filter(names, lambda name: name.isNotNull())
    judged_row = F.col(CHANGE_TYPE).isin(*ROW_IMAGES)
    return frame.withColumn(FAILED_RULES, F.when(judged_row, failed))


def kept_out(spec: PipelineSpec) -> Column:
    """True for a judged row that fails a `drop` or `quarantine` rule."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    shaping = [e.name for e in spec.expectations if e.shapes_rows]
    if not shaping:
        return F.lit(False)
    return F.coalesce(
        F.arrays_overlap(F.col(FAILED_RULES), F.array(*(F.lit(n) for n in shaping))),
        F.lit(False),
    )


def quarantined(spec: PipelineSpec) -> Column:
    """True for a judged row that fails a `quarantine` rule and no `drop` rule."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    def failing(action: ExpectationAction) -> Column:
        names = [e.name for e in spec.expectations if e.action is action]
        if not names:
            return F.lit(False)
        listed = F.array(*(F.lit(n) for n in names))
        return F.coalesce(F.arrays_overlap(F.col(FAILED_RULES), listed), F.lit(False))

    return failing(ExpectationAction.QUARANTINE) & ~failing(ExpectationAction.DROP)


def keep_out(judged: DataFrame, spec: PipelineSpec) -> DataFrame:
    """`judged` with its rows failing a `drop` or `quarantine` rule turned into `FILTERED`
    changes (deletes of their keys), without `FAILED_RULES`."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    change = F.when(kept_out(spec), F.lit(FILTERED)).otherwise(F.col(CHANGE_TYPE))
    return judged.withColumn(CHANGE_TYPE, change).drop(FAILED_RULES)


def check_rules(
    spec: PipelineSpec,
    frame: DataFrame,
    analyse: Callable[[str, Callable[[], DataFrame]], DataFrame],
) -> None:
    """Refuse a rule that does not parse, names a column the row does not have, or is not a
    boolean (`analyse(what, build)`: the conform step's analysis, which names the spec)."""
    from pyspark.sql.types import BooleanType, NullType

    for expectation in spec.expectations:
        what = (
            f"expectations.{expectation.name} ({expectation.rule!r}) is not a valid condition "
            "over the row silver would hold"
        )
        rule = expectation.rule
        checked = analyse(what, partial(_select_rule, frame, rule))
        kind = checked.schema["_rule"].dataType
        if not isinstance(kind, BooleanType | NullType):
            raise InvalidPipelineSpec(
                f"expectations.{expectation.name} ({rule!r}) is {kind.simpleString()}, not a "
                "boolean: a rule must be a condition that is true for a good row",
                pipeline_id=spec.id,
                table=spec.source,
                action=FIX_SPEC_FIELD,
            )


def _select_rule(frame: DataFrame, rule: str) -> DataFrame:
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    return frame.select(F.expr(rule).alias("_rule"))


def count_failures(judged: DataFrame, spec: PipelineSpec) -> ExpectationCounts:
    """The judged rows of `judged` and each rule's failing rows, in one aggregation."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    rules = F.col(FAILED_RULES)
    aggregates = [F.count_if(rules.isNotNull()).alias("_judged")] + [
        F.count_if(F.coalesce(F.array_contains(rules, e.name), F.lit(False))).alias(f"_r{i}")
        for i, e in enumerate(spec.expectations)
    ]
    row = judged.agg(*aggregates).collect()[0]
    return ExpectationCounts(
        int(row["_judged"]),
        {e.name: int(row[f"_r{i}"]) for i, e in enumerate(spec.expectations)},
    )


def refuse_failures(
    judged: DataFrame, spec: PipelineSpec, counts: ExpectationCounts, *, version: int
) -> None:
    """Raise for the first `fail` rule a row failed, naming a few of its keys.

    Raises:
        DataQualityError: a row fails a `fail` rule; nothing has been written.
    """
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    for expectation in spec.expectations:
        count = counts.failing.get(expectation.name, 0)
        if expectation.action is not ExpectationAction.FAIL or count == 0:
            continue
        failing = judged.filter(F.array_contains(F.col(FAILED_RULES), expectation.name))
        keys = [
            {k: row[k] for k in spec.keys}
            for row in failing.select(*(quote_ident(k) for k in spec.keys))
            .limit(_SAMPLE_KEYS)
            .collect()
        ]
        raise DataQualityError(
            f"expectation {expectation.name!r} ({expectation.rule}) failed for {count} of "
            f"{counts.judged} row(s) up to bronze version {version}, e.g. keys {keys}; its "
            "action is `fail`, so nothing was written",
            pipeline_id=spec.id,
            table=spec.source,
            action="fix those rows in bronze (a newer change of each key), or change the "
            "rule's action to `quarantine`, `drop` or `warn`, then rerun",
        )
