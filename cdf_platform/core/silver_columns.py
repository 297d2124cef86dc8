"""The columns the platform adds to a silver table, named once for every layer (the Spark writes,
the JVM-free readers, the spec's reserved names, the demo).

- `_source_commit_version`: the bronze commit version that produced the row. Delta reserves
  `_commit_version` for silver's own change feed (DELTA_TABLE_ALREADY_CONTAINS_CDC_COLUMNS).
- `_is_deleted`, `_deleted_at`: soft deletes (`delete_mode: soft`).
- `__start_at`, `__end_at`: when an SCD2 version opened and closed (NULL: the current one).
- `__changes`: SCD2 with `sequence_by`: the bronze changes a version holds (the one that opened
  it, those it took in place, the delete that closed it), so a change arriving late can be
  placed exactly (`cdf_platform.spark.write.sequenced_history`).
"""

from __future__ import annotations

SOURCE_VERSION = "_source_commit_version"
IS_DELETED = "_is_deleted"
DELETED_AT = "_deleted_at"
START_AT = "__start_at"
END_AT = "__end_at"
CHANGES = "__changes"
PLATFORM_COLUMNS = frozenset({SOURCE_VERSION, IS_DELETED, DELETED_AT, START_AT, END_AT, CHANGES})
