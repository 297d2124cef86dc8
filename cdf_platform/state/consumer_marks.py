"""The watermarks of a consumer asset (one per input table) as its own Delta log holds them,
written with its data and read back without a JVM.

A Delta commit written by Spark carries one idempotent-write transaction (`txn`: app id and
version), and nothing else written with the data survives log cleanup (`commitInfo` does not
reach checkpoints). So the app id itself holds the consumer and every input's pinned version
(and table id, to tell a recreated input), and the version is a run counter that only goes up:

    cdfp.wm.v1:{"c":"gold/revenue","cv":"2","in":{"silver/orders":[42,"<table id>"]}}   version 7

`cv` is the consumer asset's Dagster `code_version` when it wrote (null: it declares none): a
consumer whose code version changed since gets a full batch, as its old rows were computed by
other code. Marks written before `cv` was recorded lack it, and compare as unknown.

The same JSON rides in the commit's `userMetadata` for people reading the history. Reading
walks the consumer table's log back from its latest commit to the newest `txn` of the consumer:
the commit that wrote the data names the watermarks it was computed from. A consumer whose
last commit log cleanup has removed (no write for `delta.logRetentionDuration`, and newer
checkpointed commits) is found in delta-spark's checksum of the latest version when it lists
the transactions; else its watermarks are unknown (`MarksLost`), and a full recompute repairs
it.

Example:
    >>> marks = read_consumer_marks("/lake/gold/revenue", "gold/revenue")  # doctest: +SKIP
    >>> marks.counter, marks.inputs["silver/orders"].version  # doctest: +SKIP
    (7, 42)
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from cdf_platform.core.errors import MarksLost, SourceNotFound
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.tables import is_delta_table

APP_ID_PREFIX = "cdfp.wm.v1:"
# The code version of marks written before it was recorded.
UNRECORDED = "<unrecorded>"


@dataclass(frozen=True)
class InputMark:
    """How far a consumer has read one input table.

    Attributes:
        version: The last input version applied (the pinned end of the last run).
        table_id: The input table's Delta id at that version (a new id: the table was
            recreated, and the version no longer refers to it).
    """

    version: int
    table_id: str | None = None


@dataclass(frozen=True)
class ConsumerMarks:
    """A consumer's watermarks, from the commit that wrote its data.

    Attributes:
        consumer: The consumer's id (its asset key, e.g. `gold/revenue`).
        counter: The run counter of that commit (the next write uses `counter + 1`).
        inputs: Input id (asset key) -> its mark.
        commit_version: The consumer table's commit that recorded them (None when read from a
            checksum: the commit itself is gone from the log).
        code_version: The consumer's code version when it wrote (`UNRECORDED` for marks
            written before code versions were recorded; None: the asset declared none).
    """

    consumer: str
    counter: int
    inputs: Mapping[str, InputMark] = field(default_factory=dict)
    commit_version: int | None = None
    code_version: str | None = None

    def code_changed(self, code_version: str | None) -> str | None:
        """Why the consumer's rows were computed by other code than `code_version` (its code
        version now), or None: the same, or unknown (marks written before it was recorded)."""
        if self.code_version == UNRECORDED or self.code_version == code_version:
            return None
        return (
            f"the consumer's code version changed ({self.code_version} -> {code_version}) since "
            f"its last write: its rows are recomputed from its inputs' snapshots"
        )

    def version_of(self, input_id: str) -> int | None:
        """The watermark of `input_id` (None: this consumer never read it)."""
        mark = self.inputs.get(input_id)
        return None if mark is None else mark.version


def encode_app_id(
    consumer: str, inputs: Mapping[str, InputMark], code_version: str | None = None
) -> str:
    """The txn app id recording `inputs` and `code_version` for `consumer` (canonical JSON:
    sorted, compact)."""
    document = {
        "c": consumer,
        "cv": code_version,
        "in": {key: [mark.version, mark.table_id] for key, mark in sorted(inputs.items())},
    }
    return APP_ID_PREFIX + json.dumps(document, separators=(",", ":"), sort_keys=True)


def decode_app_id(app_id: str) -> tuple[str, dict[str, InputMark], str | None] | None:
    """(consumer, inputs, code version) of a txn app id written by `encode_app_id`, else None
    (the code version is `UNRECORDED` in an app id written before it was recorded)."""
    if not app_id.startswith(APP_ID_PREFIX):
        return None
    try:
        document = json.loads(app_id[len(APP_ID_PREFIX) :])
        inputs = {
            str(key): InputMark(int(value[0]), None if value[1] is None else str(value[1]))
            for key, value in document["in"].items()
        }
        code = document.get("cv", UNRECORDED)
        return str(document["c"]), inputs, None if code is None else str(code)
    except (ValueError, KeyError, TypeError, IndexError):
        return None


def _from_transactions(
    consumer: str, transactions: Mapping[str, int], commit_version: int | None
) -> ConsumerMarks | None:
    found: ConsumerMarks | None = None
    for app_id, counter in transactions.items():
        decoded = decode_app_id(app_id)
        if decoded is None or decoded[0] != consumer:
            continue
        if found is None or counter > found.counter:
            found = ConsumerMarks(consumer, counter, decoded[1], commit_version, decoded[2])
    return found


def read_consumer_marks(
    table: str, consumer: str, *, storage: StorageConfig = ENVIRONMENT_ONLY
) -> ConsumerMarks | None:
    """The watermarks `consumer` last committed to its table `table` (JVM-free, with the
    options `storage`, the lake's, gives it).

    None: the table does not exist, or no commit of the consumer is in its whole log (it was
    created, nothing written yet).

    Raises:
        MarksLost: the log was cleaned up past the consumer's last commit and no checksum
            lists its transactions.
    """
    if not is_delta_table(table, storage):
        return None
    try:
        log = DeltaLog(table, storage)
    except SourceNotFound:
        return None
    versions = log.commit_versions()
    for version in reversed(versions):
        marks = _from_transactions(consumer, log.commit(version).transactions, version)
        if marks is not None:
            return marks
    complete = (
        bool(versions)
        and versions[0] == 0
        and log.first_missing_commit(0, log.latest_version()) is None
    )
    if complete:
        return None
    listed = _checksum_transactions(log, log.latest_version())
    marks = _from_transactions(consumer, listed, None) if listed is not None else None
    if marks is None:
        first = versions[0] if versions else log.latest_version()
        raise MarksLost(
            f"log cleanup removed the commits before version {first} and no later commit "
            f"records the watermarks of {consumer}",
            table=table,
        )
    return marks


def _checksum_transactions(log: DeltaLog, version: int) -> dict[str, int] | None:
    """The `setTransactions` delta-spark listed in the checksum of `version`, if any."""
    checksum = log.checksum(version)
    listed = checksum.get("setTransactions") if checksum else None
    if not isinstance(listed, list):
        return None
    return {
        str(txn["appId"]): int(txn["version"])
        for txn in listed
        if isinstance(txn, dict) and "appId" in txn and "version" in txn
    }
