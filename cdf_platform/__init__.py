"""cdf_platform: Delta Lake silver tables kept in step with their bronze sources through the
Change Data Feed, as Dagster assets, without ever losing a change silently.

The names a user needs, from one place:

    >>> import cdf_platform as cdf
    >>> cdf.FallbackMode.SNAPSHOT_REBUILD.value
    'SNAPSHOT_REBUILD'

- the pipeline spec: `PipelineSpec`, `DeleteMode`, `ChangeSource`, `EventSpec`, `HistoryMode`,
  `FallbackMode`, `OnSpecChange`;
- the Dagster definitions: `build_defs`, the Component `CdfPipelinesComponent`, the resources
  `SparkResource`, `LakeLayout` and `WatermarkIOManager`;
- your own incremental asset: what it receives (`ChangeBatch`) and returns (`TableWrite`:
  `MergeRows` or `ReplaceRows`);
- a pipeline's state without Spark or Dagster: `pipeline_status`, `PipelineStatus`,
  `WindowState`;
- the classified errors: `CdfPlatformError` and its subclasses, each with an `incident_code`.

Each name is imported on first use (PEP 562), so `import cdf_platform` starts neither Dagster
nor Spark, and the JVM-free parts stay importable without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_HOMES = {
    "PipelineSpec": "cdf_platform.core.spec",
    "DeleteMode": "cdf_platform.core.spec",
    "ChangeSource": "cdf_platform.core.spec",
    "EventSpec": "cdf_platform.core.spec",
    "HistoryMode": "cdf_platform.core.spec",
    "FallbackMode": "cdf_platform.core.spec",
    "OnSpecChange": "cdf_platform.core.spec",
    "build_defs": "cdf_platform.definitions",
    "CdfPipelinesComponent": "cdf_platform.orchestration.component",
    "SparkResource": "cdf_platform.orchestration.resources",
    "LakeLayout": "cdf_platform.orchestration.resources",
    "WatermarkIOManager": "cdf_platform.orchestration.watermark_io_manager",
    "ChangeBatch": "cdf_platform.spark.batch",
    "TableWrite": "cdf_platform.spark.batch",
    "MergeRows": "cdf_platform.spark.batch",
    "ReplaceRows": "cdf_platform.spark.batch",
    "pipeline_status": "cdf_platform.planning.status",
    "PipelineStatus": "cdf_platform.planning.status",
    "WindowState": "cdf_platform.planning.status",
    "CdfPlatformError": "cdf_platform.core.errors",
    "CatalogManagedSource": "cdf_platform.core.errors",
    "CdfNotEnabled": "cdf_platform.core.errors",
    "ConcurrentWriteConflict": "cdf_platform.core.errors",
    "DataQualityError": "cdf_platform.core.errors",
    "EngineUnavailable": "cdf_platform.core.errors",
    "IncompatibleSchemaChange": "cdf_platform.core.errors",
    "InvalidPipelineSpec": "cdf_platform.core.errors",
    "InvalidStorageConfig": "cdf_platform.core.errors",
    "MarksLost": "cdf_platform.core.errors",
    "RebuildNeedsOverride": "cdf_platform.core.errors",
    "DestructiveActionNotPermitted": "cdf_platform.core.errors",
    "ReplayWindowLost": "cdf_platform.core.errors",
    "RuntimeEnvironmentError": "cdf_platform.core.errors",
    "SourceLogDamaged": "cdf_platform.core.errors",
    "SourceNotFound": "cdf_platform.core.errors",
    "SourceReset": "cdf_platform.core.errors",
    "SpecChangeRefused": "cdf_platform.core.errors",
    "SpecChanged": "cdf_platform.core.errors",
    "StorageUnreachable": "cdf_platform.core.errors",
    "TableNameNotLocated": "cdf_platform.core.errors",
    "TargetOwnershipConflict": "cdf_platform.core.errors",
    "UnknownReadFailure": "cdf_platform.core.errors",
    "UnsafeSparkConfig": "cdf_platform.core.errors",
    "VacuumRefused": "cdf_platform.core.errors",
}

__all__ = [  # noqa: RUF022 (grouped as `_HOMES` is)
    "__version__",
    "PipelineSpec",
    "DeleteMode",
    "ChangeSource",
    "EventSpec",
    "HistoryMode",
    "FallbackMode",
    "OnSpecChange",
    "build_defs",
    "CdfPipelinesComponent",
    "SparkResource",
    "LakeLayout",
    "WatermarkIOManager",
    "ChangeBatch",
    "TableWrite",
    "MergeRows",
    "ReplaceRows",
    "pipeline_status",
    "PipelineStatus",
    "WindowState",
    "CdfPlatformError",
    "CatalogManagedSource",
    "CdfNotEnabled",
    "ConcurrentWriteConflict",
    "DataQualityError",
    "EngineUnavailable",
    "IncompatibleSchemaChange",
    "InvalidPipelineSpec",
    "InvalidStorageConfig",
    "MarksLost",
    "RebuildNeedsOverride",
    "DestructiveActionNotPermitted",
    "ReplayWindowLost",
    "RuntimeEnvironmentError",
    "SourceLogDamaged",
    "SourceNotFound",
    "SourceReset",
    "SpecChangeRefused",
    "SpecChanged",
    "StorageUnreachable",
    "TableNameNotLocated",
    "TargetOwnershipConflict",
    "UnknownReadFailure",
    "UnsafeSparkConfig",
    "VacuumRefused",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cdf_platform' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


if TYPE_CHECKING:
    from cdf_platform.core.errors import (
        CatalogManagedSource,
        CdfNotEnabled,
        CdfPlatformError,
        ConcurrentWriteConflict,
        DataQualityError,
        DestructiveActionNotPermitted,
        EngineUnavailable,
        IncompatibleSchemaChange,
        InvalidPipelineSpec,
        InvalidStorageConfig,
        MarksLost,
        RebuildNeedsOverride,
        ReplayWindowLost,
        RuntimeEnvironmentError,
        SourceLogDamaged,
        SourceNotFound,
        SourceReset,
        SpecChanged,
        SpecChangeRefused,
        StorageUnreachable,
        TableNameNotLocated,
        TargetOwnershipConflict,
        UnknownReadFailure,
        UnsafeSparkConfig,
        VacuumRefused,
    )
    from cdf_platform.core.spec import (
        ChangeSource,
        DeleteMode,
        EventSpec,
        FallbackMode,
        HistoryMode,
        OnSpecChange,
        PipelineSpec,
    )
    from cdf_platform.definitions import build_defs
    from cdf_platform.orchestration.component import CdfPipelinesComponent
    from cdf_platform.orchestration.resources import LakeLayout, SparkResource
    from cdf_platform.orchestration.watermark_io_manager import WatermarkIOManager
    from cdf_platform.planning.status import PipelineStatus, WindowState, pipeline_status
    from cdf_platform.spark.batch import ChangeBatch, MergeRows, ReplaceRows, TableWrite
