"""Conforming transforms: what a pipeline does to bronze rows between the read and the MERGE.

Three steps, in this order, applied the same way to a change feed (incremental runs) and to a
pinned snapshot (rebuilds), so a rebuild gives what the incremental runs would have given:

1. `transform`: a Python function `DataFrame -> DataFrame` named in the spec;
2. `columns`: derived columns, Spark SQL expressions, in order;
3. `where`: a row filter. In a change feed a row it drops becomes a `delete` (a row that stops
   matching leaves silver); in a snapshot it is simply not there, which the reconcile deletes.

A snapshot goes through the same steps as a change feed: it gets the feed's three columns
(`insert` at the snapshot's version and timestamp) first, so a transform sees one shape.

Before anything runs, the steps are applied to an empty frame of the same schema and Spark's
*analysed* plan is checked (docs/design.md section 5): per-key semantics need one output row per
input row, with the keys and the change-feed columns passed through untouched, and values that
do not depend on when or where the row is processed. So aggregations, windows, joins,
generators, de-duplication, set operations, limits, samples, filters inside a transform,
subqueries and non-deterministic or clock-reading functions are refused with
`InvalidPipelineSpec`, as are expressions that do not parse or name an unknown column.

Example:
    >>> feed = conform_changes(spark, raw_feed, spec)  # doctest: +SKIP
    >>> snapshot = conform_snapshot(spark, raw_snapshot, spec, version=12, timestamp=ts)
    ... # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cdf_platform.core.errors import FIX_SPEC_FIELD, InvalidPipelineSpec
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import import_transform
from cdf_platform.core.sql import quote_ident
from cdf_platform.spark.quality.expectation_judging import (
    ROW_IMAGES,
    check_rules,
    judge,
    judged_columns,
    keep_out,
)
from cdf_platform.spark.read.change_feed import (
    CHANGE_TYPE,
    FEED_COLUMNS,
    as_change_feed,
    project_columns,
)
from cdf_platform.spark.read.changes import FILTERED

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

Transform = Callable[["DataFrame"], "DataFrame"]

# Logical plan nodes that break "one output row per input row, same key" (Spark 4 names).
_REFUSED_NODES = {
    "Aggregate": "an aggregation",
    "Window": "a window function",
    "Join": "a join",
    "LateralJoin": "a lateral join",
    "Generate": "a generator (explode)",
    "Deduplicate": "a de-duplication",
    "Distinct": "a DISTINCT",
    "Union": "a union",
    "Intersect": "an INTERSECT",
    "Except": "an EXCEPT",
    "Expand": "grouping sets",
    "Sample": "a sample",
    "GlobalLimit": "a limit",
    "LocalLimit": "a limit",
    "Offset": "an offset",
    "Tail": "a tail",
    "Filter": "a row filter (use `where`, whose dropped rows become deletes in silver)",
}
# Deterministic in Spark's sense within one query, but a rebuild would compute other values.
_CLOCK_EXPRESSIONS = {
    "CurrentTimestamp": "current_timestamp()",
    "Now": "now()",
    "CurrentDate": "current_date()",
    "LocalTimestamp": "localtimestamp()",
    "CurrentTime": "current_time()",
    "CurrentBatchTimestamp": "the batch timestamp",
}
_SUBQUERY_EXPRESSIONS = {"ScalarSubquery", "Exists", "InSubquery", "ListQuery", "LateralSubquery"}
# Spark Connect has no JVM in the client: the analysed plan is read from its printed tree.
_CONNECT_NONDETERMINISTIC = re.compile(
    r"\b(rand|randn|random|uuid|shuffle|monotonically_increasing_id|spark_partition_id|"
    r"input_file_name|input_file_block_start|input_file_block_length|uniform|randstr|"
    r"current_timestamp|now|current_date|localtimestamp|current_time)\(|"
    r"\b(scalar-subquery|exists|list|lateral-subquery)#"
)
_ROW_IMAGES = ROW_IMAGES
_ACTION = FIX_SPEC_FIELD


def load_transform(spec: PipelineSpec) -> Transform | None:
    """The Python function `spec.transform` names, imported; None without one.

    Raises:
        InvalidPipelineSpec: the module cannot be imported, or has no such callable.
    """
    return import_transform(spec)


def conform_changes(
    spark: SparkSession, feed: DataFrame, spec: PipelineSpec, *, judged: bool = False
) -> DataFrame:
    """`feed` (data columns and the change feed's three) after the spec's steps, its
    expectations' `drop` and `quarantine` rules keeping rows out as `where` does. `judged`:
    the rows are not kept out yet, and carry `FAILED_RULES` instead (the names of the rules
    each row image fails; `cdf_platform.spark.quality.expectation_judging`).

    Raises:
        InvalidPipelineSpec: a step is refused (see the module doc), before any row is read.
    """
    if not spec.conforms:
        return feed
    function = load_transform(spec)
    check_conforming(spark, feed.schema, spec, function)
    marked = _apply(feed, spec, function)
    if not spec.expectations:
        return marked
    return marked if judged else keep_out(marked, spec)


def change_rows(
    spark: SparkSession, feed: DataFrame, spec: PipelineSpec, *, judged: bool = False
) -> DataFrame:
    """The change rows a run folds from `feed` (bronze's change feed, or an event log's events
    as change rows): the spec's steps (`conform_changes`) and columns (`project_columns`)
    applied, the change feed's columns kept. `judged`: as `conform_changes`'s.

    Raises:
        InvalidPipelineSpec: a step is refused.
    """
    conformed = conform_changes(spark, feed, spec, judged=judged)
    return project_columns(conformed, spec, [*FEED_COLUMNS, *judged_columns(conformed)])


def conform_snapshot(
    spark: SparkSession,
    snapshot: DataFrame,
    spec: PipelineSpec,
    *,
    version: int,
    timestamp: datetime | None,
    judged: bool = False,
) -> DataFrame:
    """`snapshot` after the same steps as a change feed: rows the filter (or a `drop` or
    `quarantine` expectation) drops are gone. `judged`: the rows the expectations keep out
    are still there, and every row carries `FAILED_RULES`.

    The rows go through as `insert` changes of `version` at `timestamp`; the result has only
    the data columns (and `FAILED_RULES`).

    Raises:
        InvalidPipelineSpec: a step is refused (see the module doc), before any row is read.
    """
    if not spec.conforms:
        return snapshot
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    feed = as_change_feed(snapshot, version, timestamp)
    conformed = conform_changes(spark, feed, spec, judged=judged)
    kept = [c for c in conformed.columns if c not in FEED_COLUMNS]
    surviving = conformed.filter(F.col(CHANGE_TYPE).isin(*_ROW_IMAGES))
    return surviving.select(*(quote_ident(c) for c in kept))


def _apply(frame: DataFrame, spec: PipelineSpec, function: Transform | None) -> DataFrame:
    """The three steps on `frame` (already checked), then the expectations' judgement."""
    shaped = _shape(frame, spec, function)
    marked = _mark_filtered(shaped, spec) if spec.where else shaped
    return judge(marked, spec) if spec.expectations else marked


def _shape(frame: DataFrame, spec: PipelineSpec, function: Transform | None) -> DataFrame:
    """Steps 1 and 2: the Python transform, then each derived column in order."""
    from pyspark.sql import DataFrame as DataFrameType
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    if function is not None:
        given = frame
        try:
            frame = analysed(spec, f"transform {spec.transform!r} fails", lambda: function(given))
        except InvalidPipelineSpec:
            raise
        except Exception as err:
            # The user's own code failing while it builds the frame: the spec names it.
            problem = (
                f"transform {spec.transform!r} raised {type(err).__name__}: {_first_line(err)}"
            )
            raise invalid_spec(spec, problem) from err
        if not isinstance(frame, DataFrameType) and not _is_connect_frame(frame):
            raise invalid_spec(
                spec,
                f"transform {spec.transform!r} returned {type(frame).__name__}, not a DataFrame",
            )
    for name, expression in spec.columns.items():
        before = frame
        frame = analysed(
            spec,
            f"columns.{name} ({expression!r}) is not a valid expression over the bronze row",
            lambda: before.withColumn(name, F.expr(expression)),  # noqa: B023 (called at once)
        )
    return frame


def _mark_filtered(frame: DataFrame, spec: PipelineSpec) -> DataFrame:
    """Step 3 on a change feed: a row `where` does not keep becomes a delete of its key."""
    from pyspark.sql import functions as F  # noqa: N812 (the PySpark convention)

    assert spec.where is not None
    where = spec.where

    def mark() -> DataFrame:
        keep: Column = F.coalesce(F.expr(where).cast("boolean"), F.lit(False))
        deleted = F.col(CHANGE_TYPE).isin(*_ROW_IMAGES) & ~keep
        return frame.withColumn(
            CHANGE_TYPE, F.when(deleted, F.lit(FILTERED)).otherwise(F.col(CHANGE_TYPE))
        )

    what = f"where ({where!r}) is not a valid condition over the bronze row"
    return analysed(spec, what, mark)


def analysed(spec: PipelineSpec, what: str, build: Callable[[], DataFrame]) -> DataFrame:
    """`build()`, analysed now (Spark Connect analyses lazily); a parse or analysis error is
    the spec's, said as `what`."""
    from pyspark.errors import AnalysisException

    try:
        frame = build()
        if hasattr(frame, "schema"):
            frame.schema  # noqa: B018 (forces the analysis)
    except AnalysisException as err:
        raise invalid_spec(spec, f"{what}: {_first_line(err)}") from err
    return frame


def check_conforming(
    spark: SparkSession, schema: StructType, spec: PipelineSpec, function: Transform | None
) -> None:
    """Apply the steps to an empty frame of `schema` and check the analysed plan.

    Raises:
        InvalidPipelineSpec: a parse or analysis error, or a refused plan (module doc).
    """
    probe = spark.createDataFrame([], schema)
    shaped = _shape(probe, spec, function)
    final = _mark_filtered(shaped, spec) if spec.where else shaped
    if spec.expectations:
        check_rules(spec, final, lambda what, build: analysed(spec, what, build))
        final = judge(final, spec)
    plan = _jvm_plan(final)
    if plan is None:
        _check_printed_plan(final, spec)
    else:
        for node in _plan_nodes(plan):
            name = node.getClass().getSimpleName()
            if name in _REFUSED_NODES:
                raise _refused(spec, _REFUSED_NODES[name])
            expressions = node.expressions()
            for index in range(expressions.size()):
                _check_expression(spec, expressions.apply(index))
    missing = [c for c in (*spec.keys, *FEED_COLUMNS) if c not in shaped.columns]
    if missing:
        raise invalid_spec(spec, f"the transform drops {missing}; keep them as they are")
    if spec.sequence_by is not None and spec.sequence_by not in shaped.columns:
        raise invalid_spec(
            spec, f"sequence_by {spec.sequence_by!r} is neither a bronze nor a derived column"
        )
    _check_passed_through(spec, probe, shaped)


def _check_expression(spec: PipelineSpec, expression: Any) -> None:
    """Refuse a non-deterministic, clock-reading or subquery expression (a JVM Expression)."""
    for node in _expression_nodes(expression):
        name = node.getClass().getSimpleName()
        if not node.deterministic() and _children_deterministic(node):
            raise _refused(spec, f"a non-deterministic function ({node.prettyName()}())")
        if name in _CLOCK_EXPRESSIONS:
            raise _refused(spec, f"{_CLOCK_EXPRESSIONS[name]}, which a rebuild would see change")
        if name in _SUBQUERY_EXPRESSIONS:
            raise _refused(spec, "a subquery (a lookup in another table)")


def _check_passed_through(spec: PipelineSpec, probe: DataFrame, shaped: DataFrame) -> None:
    """The keys and the change-feed columns leave the steps as the same attributes that came in
    (Spark gives a recomputed or renamed column a new expression id)."""
    before = _output_ids(probe)
    after = _output_ids(shaped)
    for column in (*spec.keys, *FEED_COLUMNS):
        if after.get(column) != before.get(column):
            what = "key" if column in spec.keys else "change-feed column"
            raise invalid_spec(
                spec,
                f"the transform changes the {what} {column!r}; pass it through unchanged "
                "(a changed key breaks the one-row-per-key match between bronze and silver)",
            )


def _check_printed_plan(frame: DataFrame, spec: PipelineSpec) -> None:
    """The same checks on a Spark Connect frame, from the analysed plan Spark prints."""
    text = frame._explain_string(extended=True)  # type: ignore[operator]
    analysed = text.split("== Analyzed Logical Plan ==", 1)[-1]
    analysed = analysed.split("== Optimized Logical Plan ==", 1)[0]
    for line in analysed.strip().splitlines()[1:]:
        node = line.lstrip(" :+-").split(" ", 1)[0].split("[", 1)[0]
        if node in _REFUSED_NODES:
            raise _refused(spec, _REFUSED_NODES[node])
        if found := _CONNECT_NONDETERMINISTIC.search(line):
            raise _refused(spec, f"{found.group(0).rstrip('(#')}, which a rebuild would not repeat")
        for column in (*spec.keys, *FEED_COLUMNS):
            if re.search(rf"\bAS {re.escape(column)}#", line) and column != CHANGE_TYPE:
                raise invalid_spec(spec, f"the transform changes {column!r}; pass it through")


def _jvm_plan(frame: DataFrame) -> Any | None:
    """The analysed logical plan of a classic frame (a JVM object), None over Spark Connect."""
    jdf = getattr(frame, "_jdf", None)
    return jdf.queryExecution().analyzed() if jdf is not None else None


def _plan_nodes(plan: Any) -> Iterator[Any]:
    """Every node of a JVM logical plan above its leaves."""
    children = plan.children()
    if children.size() == 0:
        return
    yield plan
    for index in range(children.size()):
        yield from _plan_nodes(children.apply(index))


def _expression_nodes(expression: Any) -> Iterator[Any]:
    """Every node of a JVM expression tree."""
    yield expression
    children = expression.children()
    for index in range(children.size()):
        yield from _expression_nodes(children.apply(index))


def _children_deterministic(expression: Any) -> bool:
    children = expression.children()
    return all(children.apply(index).deterministic() for index in range(children.size()))


def _output_ids(frame: DataFrame) -> dict[str, int]:
    """Output column name -> expression id of a classic frame's analysed plan."""
    plan = _jvm_plan(frame)
    if plan is None:
        return {}
    output = plan.output()
    found: dict[str, int] = {}
    for index in range(output.size()):
        attribute = output.apply(index)
        found[attribute.name()] = attribute.exprId().id()
    return found


def _is_connect_frame(value: object) -> bool:
    return type(value).__module__.startswith("pyspark.sql.connect") and hasattr(value, "schema")


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def invalid_spec(spec: PipelineSpec, problem: str) -> InvalidPipelineSpec:
    """The error of `problem` in `spec`'s row-shaping fields, naming the field to fix."""
    return InvalidPipelineSpec(problem, pipeline_id=spec.id, table=spec.source, action=_ACTION)


def _refused(spec: PipelineSpec, what: str) -> InvalidPipelineSpec:
    steps = [
        step
        for step, present in (
            ("transform", spec.transform),
            ("columns", spec.columns),
            ("where", spec.where),
            ("expectations", spec.expectations),
        )
        if present
    ]
    return invalid_spec(
        spec,
        f"{'/'.join(steps)} uses {what}: silver keeps one row per bronze key, computed "
        "from that row alone, the same way in incremental runs and rebuilds",
    )
