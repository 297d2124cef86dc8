"""The table state Delta keeps outside commit files, read without a JVM.

A commit missing below a version, or cleaned up by log retention, leaves a table's `metaData`
and `protocol` to be read from elsewhere: the version's `.crc` checksum (plain JSON that
delta-spark writes beside each commit, and reads itself as a fast path for protocol and
metadata), or, failing that, the Parquet checkpoint through the `deltalake` package.

Example:
    >>> state = CheckpointState(storage, lake.storage, listing.checksums)  # doctest: +SKIP
    >>> state.metadata(10).table_id  # doctest: +SKIP
    '5f0c...'
"""

from __future__ import annotations

import json
import logging
from collections.abc import Set
from typing import TYPE_CHECKING

from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.actions import TableMetadata, TableProtocol
from cdf_platform.deltalog.delta_tables import open_delta_table
from cdf_platform.deltalog.table_files import LOG_FOLDER, TableStorage

if TYPE_CHECKING:
    from deltalake import DeltaTable

logger = logging.getLogger(__name__)


class CheckpointState:
    """A table's state at a version from its checksum or its checkpoint, not its commits.

    Args:
        storage: The table's storage (its root is the table's).
        config: The lake's object-store options, for `deltalake` to open the table with.
        checksums: The versions whose `.crc` checksum the log listing holds.
    """

    def __init__(self, storage: TableStorage, config: StorageConfig, checksums: Set[int]) -> None:
        self.storage = storage
        self.config = config
        self.checksums = checksums

    def checksum(self, version: int) -> dict[str, object] | None:
        """The parsed `.crc` checksum of `version`, or None when absent or unreadable."""
        if version not in self.checksums:
            return None
        name = f"{LOG_FOLDER}/{version:020d}.crc"
        try:
            checksum = json.loads(self.storage.read(name))
        except (OSError, ValueError):
            logger.warning("unreadable checksum %s/%s", self.storage.root, name)
            return None
        return checksum if isinstance(checksum, dict) else None

    def checksum_metadata(self, version: int) -> TableMetadata | None:
        """The metadata recorded in the `.crc` checksum of `version`, if there is one."""
        checksum = self.checksum(version)
        found = checksum.get("metadata") if checksum else None
        return TableMetadata.from_action(found) if isinstance(found, dict) else None

    def checksum_protocol(self, version: int) -> TableProtocol | None:
        """The protocol recorded in the `.crc` checksum of `version`, if there is one."""
        checksum = self.checksum(version)
        found = checksum.get("protocol") if checksum else None
        return TableProtocol.from_action(found) if isinstance(found, dict) else None

    def metadata(self, version: int) -> TableMetadata:
        """The metadata of the table state at checkpoint `version`: its checksum's, else the
        checkpoint's."""
        from_checksum = self.checksum_metadata(version)
        if from_checksum is not None:
            return from_checksum
        table = self._deltalake_table(version)
        meta = table.metadata()
        return TableMetadata(
            table_id=str(meta.id),
            schema=json.loads(table.schema().to_json()),
            partition_columns=tuple(meta.partition_columns),
            configuration=dict(meta.configuration),
        )

    def protocol(self, version: int) -> TableProtocol:
        """The protocol of the table state at checkpoint `version`: its checksum's, else the
        checkpoint's."""
        from_checksum = self.checksum_protocol(version)
        if from_checksum is not None:
            return from_checksum
        protocol = self._deltalake_table(version).protocol()
        return TableProtocol(
            min_reader_version=protocol.min_reader_version,
            min_writer_version=protocol.min_writer_version,
            reader_features=tuple(protocol.reader_features or ()),
            writer_features=tuple(protocol.writer_features or ()),
        )

    def _deltalake_table(self, version: int) -> DeltaTable:
        """The table at `version` through `deltalake`, for state only a Parquet checkpoint
        holds: it has a Parquet reader (pyarrow is absent). deltalake 1.6 loads the file list
        too (its `without_files` is ignored): slower, but only reached for checkpoints without
        a checksum. Object-store options are the location's, as for our own reads."""
        return open_delta_table(self.storage.root, self.config, version=version)
