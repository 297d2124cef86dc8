"""Classify a Spark/Delta failure into the platform's error taxonomy (docs/design.md section 6).

Structured facts come first: the error conditions (`getCondition()`) and the Java exception
classes (Delta's typed `io.delta.exceptions.*`) along the whole cause chain, whether the failure
reached Python as a `CapturedException`, a raw `Py4JJavaError` (common for failures inside an
action) or a Spark Connect `SparkConnectGrpcException` (no JVM in this process). Only when no
structured fact matches a rule is the message text searched for the same names, since some
failures carry the condition in a nested message only (a task failure wraps the executor's
`FAILED_READ_FILE` in a generic `SparkException`).

Example:
    >>> rule = rule_for(failure_facts(err))  # doctest: +SKIP
    >>> rule.error if rule else UnknownReadFailure  # doctest: +SKIP
    <class 'cdf_platform.core.errors.ReplayWindowLost'>
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cdf_platform.core.errors import (
    CdfNotEnabled,
    CdfPlatformError,
    ConcurrentWriteConflict,
    EngineUnavailable,
    IncompatibleSchemaChange,
    ReplayWindowLost,
    SourceNotFound,
    UnknownReadFailure,
)

# Causes followed at most (Java chains can loop through suppressed/cause references).
MAX_CHAIN = 16


@dataclass(frozen=True)
class FailureRule:
    """One row of the classification table.

    Attributes:
        error: the platform error a matching failure becomes.
        conditions: Spark/Delta error conditions; a sub-condition (`A.B`) matches its parent `A`,
            and an entry ending in `_` matches every condition it starts.
        java_classes: fully qualified Java exception classes (Delta's typed exceptions).
        summary: the phrase the caller's message starts from.
        snapshot_summary: the phrase for a snapshot read, where `summary` speaks of the change
            feed (None: `summary` serves both).
    """

    error: type[CdfPlatformError]
    conditions: tuple[str, ...]
    java_classes: tuple[str, ...]
    summary: str
    snapshot_summary: str | None = None

    def summary_of(self, *, snapshot: bool) -> str:
        """The phrase for a change-feed read, or for a snapshot read when `snapshot`."""
        if snapshot and self.snapshot_summary is not None:
            return self.snapshot_summary
        return self.summary

    def matches_condition(self, condition: str) -> bool:
        """Whether `condition` (e.g. `FAILED_READ_FILE.FILE_NOT_EXIST`) is one of this rule's."""
        parent = condition.split(".")[0]
        return any(
            parent == name or (name.endswith("_") and parent.startswith(name))
            for name in self.conditions
        )

    def matches_text(self, text: str) -> bool:
        """Fallback: whether `text` names one of the rule's conditions or classes."""
        short_classes = (name.rsplit(".", 1)[-1] for name in self.java_classes)
        return any(name in text for name in (*self.conditions, *short_classes))


# In priority order: a failure that matches several rules by text takes the first.
RULES: tuple[FailureRule, ...] = (
    # Optimistic-concurrency conflicts of a silver write: another run committed first.
    FailureRule(
        ConcurrentWriteConflict,
        conditions=("DELTA_CONCURRENT_", "DELTA_PROTOCOL_CHANGED", "DELTA_METADATA_CHANGED"),
        java_classes=(
            "io.delta.exceptions.ConcurrentAppendException",
            "io.delta.exceptions.ConcurrentDeleteReadException",
            "io.delta.exceptions.ConcurrentDeleteDeleteException",
            "io.delta.exceptions.ConcurrentTransactionException",
            "io.delta.exceptions.ProtocolChangedException",
            "io.delta.exceptions.MetadataChangedException",
        ),
        summary="another run committed to silver while this one applied",
    ),
    FailureRule(
        SourceNotFound,
        conditions=(
            "DELTA_MISSING_DELTA_TABLE",
            "DELTA_TABLE_NOT_FOUND",
            "PATH_NOT_FOUND",
            "DELTA_PATH_DOES_NOT_EXIST",
        ),
        java_classes=(),
        summary="the source is not a readable Delta table while reading",
    ),
    FailureRule(
        CdfNotEnabled,
        conditions=("DELTA_MISSING_CHANGE_DATA", "DELTA_CHANGE_TABLE_FEED_DISABLED"),
        java_classes=(),
        summary="the change feed is not recorded for all of",
    ),
    FailureRule(
        IncompatibleSchemaChange,
        conditions=(
            "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_SCHEMA_CHANGE",
            "DELTA_CHANGE_DATA_FEED_INCOMPATIBLE_DATA_SCHEMA",
            "DELTA_BLOCK_CDF_COLUMN_MAPPING_READS",
            "DELTA_STREAMING_INCOMPATIBLE_SCHEMA_CHANGE",
        ),
        java_classes=(),
        summary="a non-additive schema change lies inside",
    ),
    # The change feed for the range is gone: vacuumed files, cleaned-up commits, or the
    # Delta >= 4.1 time-travel limit on CDF reads older than delta.deletedFileRetentionDuration.
    FailureRule(
        ReplayWindowLost,
        conditions=(
            "FAILED_READ_FILE",
            "DELTA_CHANGE_DATA_FILE_NOT_FOUND",
            "DELTA_FILE_NOT_FOUND",
            "DELTA_FILE_NOT_FOUND_DETAILED",
            "DELTA_TRUNCATED_TRANSACTION_LOG",
            "DELTA_LOG_FILE_NOT_FOUND",
            "DELTA_VERSIONS_NOT_CONTIGUOUS",
            "DELTA_UNSUPPORTED_TIME_TRAVEL_BEYOND_DELETED_FILE_RETENTION_DURATION",
            "DELTA_STATE_RECOVER_ERROR",
            "DELTA_NO_COMMITS_FOUND",
            "DELTA_INVALID_CDC_RANGE",
        ),
        java_classes=("java.io.FileNotFoundException",),
        summary="the change feed can no longer be read for",
        # A snapshot read (`versionAsOf`) meets the same conditions: its data files vacuumed or
        # deleted, its commits cleaned up, or its version past the time-travel retention.
        snapshot_summary="the files can no longer be read for",
    ),
    # The Spark Connect server went away under the run: its channel is refused or cut
    # (gRPC UNAVAILABLE once the client's retries are spent), or a restarted server no longer
    # knows the run's session (INVALID_HANDLE.SESSION_*; pyspark's client then closes the
    # session: NO_ACTIVE_SESSION, or its assertion on the server-side session id).
    FailureRule(
        EngineUnavailable,
        conditions=(
            "INVALID_HANDLE",
            "NO_ACTIVE_SESSION",
            "RETRIES_EXCEEDED",
            # Texts only: a gRPC status and pyspark's assertion carry no error condition.
            "StatusCode.UNAVAILABLE",
            "incorrect server side session identifier",
        ),
        java_classes=(),
        summary="the Spark Connect server went away while reading",
    ),
)
CONFLICT_RULE, ENGINE_RULE = RULES[0], RULES[-1]

# What says that the engine the run used is a new one: the server no longer knows the run's
# session (`INVALID_HANDLE.SESSION_*`), and pyspark's client closed it (`NO_ACTIVE_SESSION`,
# or its assertion on the server-side session id).
_SESSION_LOST = ("INVALID_HANDLE", "NO_ACTIVE_SESSION", "incorrect server side session identifier")

SESSION_LOST = (
    "the run's session on the engine was lost: the engine restarted while the run used it"
)
ENGINE_ACTION = (
    "start the engine (`cdf-platform engine`, docs/production.md; under the deployment's "
    "supervisor it is restarted by itself) or check $CDF_SPARK_REMOTE; the step is retried and "
    "resumes from silver's watermark"
)
SESSION_LOST_ACTION = (
    "nothing to fix for this run: the step is retried in a new session and resumes from "
    "silver's watermark; if the engine restarts often, read its log for why"
)


# The first line py4j gives a Java exception it hands over raw: the call, not the failure (the
# Java exception follows on the next line, after ": ").
_PY4J_PREAMBLE = re.compile(r"^Py4JJavaError: An error occurred while calling \S+\.$")


@dataclass(frozen=True)
class FailureFacts:
    """What a failure says about itself along its cause chain, outermost first."""

    conditions: tuple[str, ...]
    java_classes: tuple[str, ...]
    text: str

    @property
    def first_line(self) -> str:
        """The failure's first message line, for the platform error's message: for a raw
        Py4JJavaError, whose first line only names the JVM object called, the Java exception's
        line after it.

        Example:
            >>> raw = "Py4JJavaError: An error occurred while calling o85.get.\\n: java.util."
            >>> FailureFacts((), (), raw + "NoSuchElementException: No value present").first_line
            'java.util.NoSuchElementException: No value present'
        """
        lines = self.text.strip().splitlines()
        if len(lines) > 1 and _PY4J_PREAMBLE.match(lines[0]):
            return lines[1].lstrip(": ").strip()[:500]
        return lines[0][:500] if lines else ""


def _java_chain(throwable: object) -> Iterator[object]:
    seen = 0
    while throwable is not None and seen < MAX_CHAIN:
        yield throwable
        seen += 1
        try:
            throwable = throwable.getCause()  # type: ignore[attr-defined]
        except Exception:
            return


def _java_facts(throwable: object) -> tuple[list[str], list[str]]:
    """Conditions and class names of a Java throwable's cause chain (through py4j)."""
    conditions: list[str] = []
    classes: list[str] = []
    for link in _java_chain(throwable):
        try:
            classes.append(str(link.getClass().getName()))  # type: ignore[attr-defined]
        except Exception:
            continue
        try:  # only SparkThrowable has it; py4j raises for a missing method
            condition = link.getCondition()  # type: ignore[attr-defined]
        except Exception:
            condition = None
        if condition:
            conditions.append(str(condition))
    return conditions, classes


def _python_chain(err: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    link: BaseException | None = err
    while link is not None and id(link) not in seen and len(seen) < MAX_CHAIN:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _server_stack_trace(err: BaseException) -> str | None:
    """The server-side stack trace a Spark Connect error carries, if any."""
    if not type(err).__module__.startswith("pyspark.errors.exceptions.connect"):
        return None
    get_trace = getattr(err, "getStackTrace", None)
    try:
        trace = get_trace() if callable(get_trace) else None
    except Exception:
        return None
    return trace if isinstance(trace, str) else None


def failure_facts(err: BaseException) -> FailureFacts:
    """The structured facts of `err` (conditions, Java classes) and its text."""
    conditions: list[str] = []
    classes: list[str] = []
    texts: list[str] = []
    for link in _python_chain(err):
        texts.append(f"{type(link).__name__}: {link}")
        get_condition = getattr(link, "getCondition", None)
        if callable(get_condition):
            try:
                condition = get_condition()
            except Exception:
                condition = None
            if condition:
                conditions.append(str(condition))
        # Over Spark Connect the server's Java stack trace (class names, causes) is text.
        server_trace = _server_stack_trace(link)
        if server_trace and server_trace not in texts[-1]:
            texts.append(server_trace)
        # A raw Py4JJavaError holds the Java exception; a CapturedException its origin.
        java = getattr(link, "java_exception", None) or getattr(link, "_origin", None)
        if java is not None:
            found_conditions, found_classes = _java_facts(java)
            conditions.extend(found_conditions)
            classes.extend(found_classes)
    return FailureFacts(tuple(conditions), tuple(classes), "\n".join(texts))


def rule_for(facts: FailureFacts) -> FailureRule | None:
    """The rule `facts` match: structured facts first (outermost cause first), then the text."""
    for condition in facts.conditions:
        for rule in RULES:
            if rule.matches_condition(condition):
                return rule
    for name in facts.java_classes:
        for rule in RULES:
            if name in rule.java_classes:
                return rule
    for rule in RULES:
        if rule.matches_text(facts.text):
            return rule
    return None


def engine_loss(facts: FailureFacts) -> str:
    """What happened to the engine under a run, in words, from what the failure says (its
    conditions and text); never the gRPC error's own text (`<_InactiveRpcError of RPC...`).

    Example:
        >>> engine_loss(FailureFacts(("INVALID_HANDLE.SESSION_NOT_FOUND",), (), ""))
        "the run's session on the engine was lost: the engine restarted while the run used it"
        >>> engine_loss(FailureFacts((), (), "<_InactiveRpcError ... StatusCode.UNAVAILABLE>"))
        'the engine stopped answering while the run used it (its connection was refused or cut)'
    """
    if _session_lost(facts):
        return SESSION_LOST
    return "the engine stopped answering while the run used it (its connection was refused or cut)"


def engine_loss_action(facts: FailureFacts) -> str:
    """What to do about the loss `engine_loss` names: nothing for a lost session (the engine is
    back), else start the engine."""
    return SESSION_LOST_ACTION if _session_lost(facts) else ENGINE_ACTION


def _session_lost(facts: FailureFacts) -> bool:
    said = (*facts.conditions, facts.text)
    return any(marker in part for marker in _SESSION_LOST for part in said)


def is_conflict(err: BaseException) -> bool:
    """Whether `err` is an optimistic-concurrency conflict (another writer committed first)."""
    return rule_for(failure_facts(err)) is CONFLICT_RULE


def classify_run_failure(err: BaseException, pipeline_id: str, *, rerun: str) -> CdfPlatformError:
    """A failure that escaped a run's own classification, as a platform error naming the
    pipeline: the class of the rule `err` matches (the table above), else `UnknownReadFailure`;
    the message quotes `err`'s first line. A `CdfPlatformError` is returned as it is.

    Args:
        err: what the run raised.
        pipeline_id: the pipeline whose run (or rebuild) failed.
        rerun: how to run it again, for the action (e.g. "`cdf-platform run orders`").
    """
    if isinstance(err, CdfPlatformError):
        return err
    facts = failure_facts(err)
    problem = f"the run failed: {facts.first_line or type(err).__name__}"
    rule = rule_for(facts)
    if rule is ENGINE_RULE:
        return EngineUnavailable(
            engine_loss(facts), pipeline_id=pipeline_id, action=engine_loss_action(facts)
        )
    if rule is not None:
        return rule.error(problem, pipeline_id=pipeline_id)
    return UnknownReadFailure(
        problem,
        pipeline_id=pipeline_id,
        # Silver's watermark moves only in the commit that writes silver (docs/design.md
        # section 3), so a rerun after any failure resumes exactly where silver stands.
        action=f"fix the cause the error names, then rerun {rerun}: it resumes from silver's "
        "watermark, which only a committed silver write moves",
    )


@contextmanager
def classified_run(pipeline_id: str, *, rerun: str) -> Iterator[None]:
    """Re-raise any failure inside as a platform error (`classify_run_failure`), the original
    chained as its cause; a `CdfPlatformError` passes through. Classification only: nothing
    is retried or swallowed.

    Example:
        >>> with classified_run("orders", rerun="`cdf-platform run orders`"):  # doctest: +SKIP
        ...     PipelineRunner.on(control, factory).run(spec)
    """
    try:
        yield
    except CdfPlatformError:
        raise
    except Exception as err:
        raise classify_run_failure(err, pipeline_id, rerun=rerun) from err
