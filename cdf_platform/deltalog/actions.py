"""The actions of one Delta commit file, parsed without a JVM.

A commit file (`_delta_log/<version:020d>.json`) holds one JSON action per line: `commitInfo`,
`metaData`, `protocol`, `add`, `remove`, `cdc`, `txn`, ... This module turns one such file into
a frozen `Commit`, resolving the paths the change feed would read (data files, `_change_data`
files, deletion-vector files) the way delta-spark 4.4 does.

Example:
    >>> commit = parse_commit(7, text, file_modification_ms=1_700_000_000_000,
    ...                       table_root="/lake/bronze/orders")  # doctest: +SKIP
    >>> [action.path for action in commit.files_read_by_cdf()]  # doctest: +SKIP
    ['_change_data/cdc-00000-....snappy.parquet']
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlparse

import orjson

CDF_ENABLED_KEY = "delta.enableChangeDataFeed"
# Delta still honours the pre-GA name (DeltaConfigs.CHANGE_DATA_FEED has it as alternate key).
CDF_ENABLED_LEGACY_KEY = "delta.enableChangeDataCapture"
COLUMN_MAPPING_PHYSICAL_NAME = "delta.columnMapping.physicalName"

_Z85_ALPHABET = (
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)
_Z85_VALUE = {char: index for index, char in enumerate(_Z85_ALPHABET)}
# A 'u' deletion vector ends with the Z85 form of a 16-byte UUID: 20 characters.
_Z85_UUID_LENGTH = 20
# MERGE that changed no row may still rewrite files with dataChange=true; CDCReader then serves
# no rows from them (CDCReader.shouldSkipFileActionsInCommit), so they are not needed either.
_NO_OP_MERGE_METRICS = ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted")


def z85_decode(text: str) -> bytes:
    """Decode Z85 (ZeroMQ base-85) text, as Delta uses for deletion-vector UUIDs.

    Raises:
        ValueError: the length is not a multiple of 5 or a character is outside the alphabet.
    """
    if len(text) % 5:
        raise ValueError(f"Z85 text length must be a multiple of 5, got {len(text)}")
    out = bytearray()
    for start in range(0, len(text), 5):
        value = 0
        for char in text[start : start + 5]:
            if char not in _Z85_VALUE:
                raise ValueError(f"{char!r} is not a Z85 character")
            value = value * 85 + _Z85_VALUE[char]
        out += value.to_bytes(4, "big")
    return bytes(out)


def decode_action_path(path: str) -> str:
    """The filesystem path behind a path as written in a log action.

    Relative paths are URL-encoded (`date=2024-01-01/part-0%20.parquet`), so they are decoded
    once and stay relative to the table root. `file:` URIs become absolute local paths; other
    URIs (s3a://, abfss://) are returned as they are.
    """
    if "%" not in path and ":" not in path:
        return path  # the common case, a plain relative path: nothing to decode (and fast)
    parsed = urlparse(path)
    if len(parsed.scheme) > 1:  # a one-letter "scheme" is a Windows drive letter
        return unquote(parsed.path) if parsed.scheme == "file" else path
    return unquote(path)


@dataclass(frozen=True)
class DeletionVector:
    """A deletion vector attached to an `add` or `remove` action.

    Attributes:
        storage_type: 'u' (UUID-named file in the table), 'p' (absolute path), 'i' (inline).
        path_or_inline_dv: The descriptor exactly as written in the log.
        cardinality: Number of rows the vector deletes.
        file_path: Absolute path (or remote URI) of the vector's file; None for inline vectors,
            which need no file.
    """

    storage_type: str
    path_or_inline_dv: str
    cardinality: int
    file_path: str | None

    @classmethod
    def from_action(cls, descriptor: Mapping[str, Any], table_root: str) -> DeletionVector:
        """Build from the `deletionVector` object of an action, resolving its file."""
        storage_type = str(descriptor["storageType"])
        raw = str(descriptor["pathOrInlineDv"])
        file_path: str | None
        if storage_type == "u":
            # PROTOCOL.md "Deletion Vector Descriptor": <random prefix><20-char Z85 UUID>, stored
            # at <table>/<prefix>/deletion_vector_<uuid>.bin (no folder when the prefix is empty).
            prefix, encoded = raw[:-_Z85_UUID_LENGTH], raw[-_Z85_UUID_LENGTH:]
            name = f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"
            file_path = (
                os.path.join(table_root, prefix, name) if prefix else os.path.join(table_root, name)
            )
        elif storage_type == "p":
            # An absolute path or URI; os.path.join keeps an absolute second part as it is.
            decoded = decode_action_path(raw)
            file_path = decoded if "://" in decoded else os.path.join(table_root, decoded)
        else:
            file_path = None
        return cls(storage_type, raw, int(descriptor.get("cardinality", 0)), file_path)


@dataclass(frozen=True)
class FileAction:
    """An `add`, `remove` or `cdc` action: one file the table gained, lost or logged changes in.

    Attributes:
        path: The decoded path, relative to the table root (posix separators) unless the log
            wrote an absolute URI (then an absolute local path, or the remote URI).
        data_change: The action's `dataChange` flag; OPTIMIZE and friends write False. `cdc`
            actions are always False in the log, although they carry changed rows.
        deletion_vector: The attached deletion vector, if any.
        deletion_timestamp_ms: For `remove`: when the file was logically deleted (VACUUM keeps
            the file until this plus `delta.deletedFileRetentionDuration`).
        size: The file's size in bytes, when the action gives it (`remove` may not).
    """

    path: str
    data_change: bool
    deletion_vector: DeletionVector | None = None
    deletion_timestamp_ms: int | None = None
    size: int | None = None

    @classmethod
    def from_action(cls, action: Mapping[str, Any], table_root: str) -> FileAction:
        """Build from the body of an `add`, `remove` or `cdc` action."""
        descriptor = action.get("deletionVector")
        deletion_timestamp = action.get("deletionTimestamp")
        size = action.get("size")
        return cls(
            path=decode_action_path(str(action["path"])),
            data_change=bool(action.get("dataChange", True)),
            deletion_vector=(
                DeletionVector.from_action(descriptor, table_root) if descriptor else None
            ),
            deletion_timestamp_ms=int(deletion_timestamp) if deletion_timestamp else None,
            size=int(size) if size is not None else None,
        )


@dataclass(frozen=True)
class TableMetadata:
    """A `metaData` action: the table's identity, schema, partitioning and properties.

    Attributes:
        table_id: The table's UUID; a new id means the table was recreated.
        schema: The parsed `schemaString` (Spark's JSON form of a StructType).
        partition_columns: Logical names of the partition columns, in order.
        configuration: The table properties (`delta.enableChangeDataFeed`, ...).
    """

    table_id: str
    schema: Mapping[str, Any]
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str]

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> TableMetadata:
        """Build from the body of a `metaData` action (commit file or `.crc` checksum)."""
        schema_string = action.get("schemaString") or '{"type": "struct", "fields": []}'
        return cls(
            table_id=str(action["id"]),
            schema=json.loads(schema_string),
            partition_columns=tuple(action.get("partitionColumns") or ()),
            configuration={str(k): str(v) for k, v in (action.get("configuration") or {}).items()},
        )

    def table_property(self, key: str) -> str | None:
        """A table property; exact key first, then case-insensitively (as Delta matches them)."""
        if key in self.configuration:
            return self.configuration[key]
        lowered = key.lower()
        return next((v for k, v in self.configuration.items() if k.lower() == lowered), None)

    @property
    def cdf_enabled(self) -> bool:
        """Whether this metadata records change data (CDCReader.isCDCEnabledOnTable)."""
        value = self.table_property(CDF_ENABLED_KEY)
        if value is None:
            value = self.table_property(CDF_ENABLED_LEGACY_KEY)
        # Scala's String.toBoolean, which Delta uses, is case-insensitive.
        return value is not None and value.strip().lower() == "true"


@dataclass(frozen=True)
class TableProtocol:
    """A `protocol` action: what a reader and a writer must support.

    Attributes:
        min_reader_version: `minReaderVersion`.
        min_writer_version: `minWriterVersion`.
        reader_features: Named reader features (reader version 3), e.g. `deletionVectors`.
        writer_features: Named writer features (writer version 7).
    """

    min_reader_version: int
    min_writer_version: int
    reader_features: tuple[str, ...] = ()
    writer_features: tuple[str, ...] = ()

    @classmethod
    def from_action(cls, action: Mapping[str, Any]) -> TableProtocol:
        """Build from the body of a `protocol` action (commit file or `.crc` checksum)."""
        return cls(
            min_reader_version=int(action.get("minReaderVersion", 1)),
            min_writer_version=int(action.get("minWriterVersion", 2)),
            reader_features=tuple(action.get("readerFeatures") or ()),
            writer_features=tuple(action.get("writerFeatures") or ()),
        )

    def has_feature(self, name: str) -> bool:
        """Whether `name` is a reader or writer feature of the table."""
        return name in self.reader_features or name in self.writer_features


@dataclass(frozen=True)
class Commit:
    """One commit of the table, as a change-feed read would see it.

    Attributes:
        version: The commit version.
        timestamp_ms: The time Delta gives this version: the in-commit timestamp when the commit
            has one (`delta.enableInCommitTimestamps`), else the modification time of the commit
            file. This is `Snapshot.timestamp` in delta-spark 4.4, the value its time-travel and
            CDF retention check compares with now - `delta.deletedFileRetentionDuration`.
            (`commitInfo.timestamp` is NOT used by Delta for anything.)
        operation: `commitInfo.operation` (WRITE, MERGE, OPTIMIZE, VACUUM START, ...), if logged.
        adds: The `add` actions.
        removes: The `remove` actions.
        cdcs: The `cdc` actions (files under `_change_data/`).
        metadata: The `metaData` action of this commit, if it has one.
        protocol: The `protocol` action of this commit, if it has one.
        has_data_change: Whether the commit changed rows: any add/remove with dataChange=true
            or any cdc file. OPTIMIZE, VACUUM START/END and property changes have none.
        in_commit_timestamp_ms: `commitInfo.inCommitTimestamp`, when in-commit timestamps are on.
        file_modification_ms: Modification time of the commit file.
        operation_metrics: `commitInfo.operationMetrics` as logged (delta-spark writes the
            values as strings, delta-rs as numbers).
        transactions: The `txn` actions (idempotent-write app id -> version) of this commit.
        user_metadata: `commitInfo.userMetadata`, if logged.
    """

    version: int
    timestamp_ms: int
    operation: str | None
    adds: tuple[FileAction, ...]
    removes: tuple[FileAction, ...]
    cdcs: tuple[FileAction, ...]
    metadata: TableMetadata | None
    protocol: TableProtocol | None
    has_data_change: bool
    in_commit_timestamp_ms: int | None
    file_modification_ms: int
    operation_metrics: Mapping[str, Any]
    transactions: Mapping[str, int] = field(default_factory=dict)
    user_metadata: str | None = None

    def files_read_by_cdf(self) -> tuple[FileAction, ...]:
        """The file actions a batch change-feed read of this version reads.

        Mirrors CDCReader.changesToDF in delta-spark 4.4: a commit with `cdc` files is served
        from them alone; otherwise from its add/remove actions with dataChange=true (whose
        deletion vectors are read too), except for a MERGE whose metrics say it changed nothing.
        """
        if self.cdcs:
            return self.cdcs
        if self.operation == "MERGE" and all(
            str(self.operation_metrics.get(name)) == "0" for name in _NO_OP_MERGE_METRICS
        ):
            return ()
        return tuple(a for a in (*self.removes, *self.adds) if a.data_change)


def parse_commit(
    version: int, text: str | bytes, *, file_modification_ms: int, table_root: str
) -> Commit:
    """Parse the text of one commit file.

    Args:
        version: The commit's version.
        text: The file's content (newline-delimited JSON actions), as text or bytes.
        file_modification_ms: The file's modification time in epoch milliseconds.
        table_root: The table's absolute path or URI, to resolve deletion-vector files.
    """
    adds: list[FileAction] = []
    removes: list[FileAction] = []
    cdcs: list[FileAction] = []
    metadata: TableMetadata | None = None
    protocol: TableProtocol | None = None
    commit_info: Mapping[str, Any] = {}
    transactions: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        action: dict[str, Any] = orjson.loads(line)
        if "add" in action:
            adds.append(FileAction.from_action(action["add"], table_root))
        elif "remove" in action:
            removes.append(FileAction.from_action(action["remove"], table_root))
        elif "cdc" in action:
            cdcs.append(FileAction.from_action(action["cdc"], table_root))
        elif "metaData" in action:
            metadata = TableMetadata.from_action(action["metaData"])
        elif "commitInfo" in action:
            commit_info = action["commitInfo"] or {}
        elif "protocol" in action:
            protocol = TableProtocol.from_action(action["protocol"])
        elif "txn" in action:
            txn = action["txn"] or {}
            transactions[str(txn.get("appId"))] = int(txn.get("version", -1))
    ict = commit_info.get("inCommitTimestamp")
    in_commit_timestamp = int(ict) if ict is not None else None
    return Commit(
        version=version,
        timestamp_ms=in_commit_timestamp
        if in_commit_timestamp is not None
        else file_modification_ms,
        operation=commit_info.get("operation"),
        adds=tuple(adds),
        removes=tuple(removes),
        cdcs=tuple(cdcs),
        metadata=metadata,
        protocol=protocol,
        has_data_change=bool(cdcs) or any(a.data_change for a in (*adds, *removes)),
        in_commit_timestamp_ms=in_commit_timestamp,
        file_modification_ms=file_modification_ms,
        operation_metrics=commit_info.get("operationMetrics") or {},
        transactions=transactions,
        user_metadata=commit_info.get("userMetadata"),
    )
