"""cdf_platform: Delta Lake silver tables kept in step with their bronze sources through the
Change Data Feed, as Dagster assets, without ever losing a change silently.

The names a user needs, from one place:

    >>> import cdf_platform as cdf
    >>> cdf.FallbackMode.SNAPSHOT_REBUILD.value
    'SNAPSHOT_REBUILD'

- the pipeline spec: `PipelineSpec`, `DeleteMode`, `ChangeSource`, `EventSpec`, `Expectation`,
  `ExpectationAction`, `HistoryMode`, `FallbackMode`, `OnSpecChange`;
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
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# The public face, listed once: each public name and the module that defines it, in the order
# the API reference shows them (docs/reference.md is generated from it). `__all__`, `__getattr__`
# and `__dir__` derive from it; the type checkers' imports at the end must name the same
# (cdf_platform_tests/test_public_names.py checks they do). Read-only: a constant, never state.
_HOMES: Mapping[str, str] = MappingProxyType(
    {
        "PipelineSpec": "cdf_platform.core.spec.pipeline_spec",
        "DeleteMode": "cdf_platform.core.spec.modes",
        "ChangeSource": "cdf_platform.core.spec.modes",
        "EventSpec": "cdf_platform.core.spec.event_spec",
        "Expectation": "cdf_platform.core.spec.expectations",
        "ExpectationAction": "cdf_platform.core.spec.expectations",
        "HistoryMode": "cdf_platform.core.spec.modes",
        "FallbackMode": "cdf_platform.core.spec.modes",
        "OnSpecChange": "cdf_platform.core.spec.modes",
        "VerifyRepair": "cdf_platform.core.spec.modes",
        "build_defs": "cdf_platform.definitions",
        "CdfPipelinesComponent": "cdf_platform.orchestration.component",
        "SparkResource": "cdf_platform.orchestration.shared.spark_resource",
        "LakeLayout": "cdf_platform.orchestration.shared.resources",
        "WatermarkIOManager": "cdf_platform.orchestration.io_manager.watermark_io_manager",
        "ChangeBatch": "cdf_platform.spark.read.batch",
        "TableWrite": "cdf_platform.spark.read.batch",
        "MergeRows": "cdf_platform.spark.read.batch",
        "ReplaceRows": "cdf_platform.spark.read.batch",
        "pipeline_status": "cdf_platform.planning.status",
        "PipelineStatus": "cdf_platform.planning.status",
        "WindowState": "cdf_platform.planning.status",
        # The errors, in their module's order (the taxonomy of docs/design.md section 6).
        "CdfPlatformError": "cdf_platform.core.errors",
        "InvalidPipelineSpec": "cdf_platform.core.errors",
        "SourceNotFound": "cdf_platform.core.errors",
        "SourceLogDamaged": "cdf_platform.core.errors",
        "TableNameNotLocated": "cdf_platform.core.errors",
        "CatalogManagedSource": "cdf_platform.core.errors",
        "CdfNotEnabled": "cdf_platform.core.errors",
        "ReplayWindowLost": "cdf_platform.core.errors",
        "SourceReset": "cdf_platform.core.errors",
        "IncompatibleSchemaChange": "cdf_platform.core.errors",
        "DataQualityError": "cdf_platform.core.errors",
        "SpecChanged": "cdf_platform.core.errors",
        "SpecChangeRefused": "cdf_platform.core.errors",
        "UnsafeSparkConfig": "cdf_platform.core.errors",
        "UnknownReadFailure": "cdf_platform.core.errors",
        "TargetOwnershipConflict": "cdf_platform.core.errors",
        "RebuildNeedsOverride": "cdf_platform.core.errors",
        "DestructiveActionNotPermitted": "cdf_platform.core.errors",
        "VacuumRefused": "cdf_platform.core.errors",
        "VerificationRefused": "cdf_platform.core.errors",
        "MarksLost": "cdf_platform.core.errors",
        "ConcurrentWriteConflict": "cdf_platform.core.errors",
        "InvalidStorageConfig": "cdf_platform.core.errors",
        "InvalidAlertConfig": "cdf_platform.core.errors",
        "InvalidRunConfig": "cdf_platform.core.errors",
        "StorageUnreachable": "cdf_platform.core.errors",
        "RuntimeEnvironmentError": "cdf_platform.core.errors",
        "EngineUnavailable": "cdf_platform.core.errors",
    }
)

__all__ = ["__version__", *_HOMES]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'cdf_platform' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # imported once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


# What type checkers and editors see for each lazily imported name (nothing runs at import);
# `X as X` is the explicit re-export every checker reads, whatever it makes of `__all__`.
if TYPE_CHECKING:
    from cdf_platform.core.errors import CatalogManagedSource as CatalogManagedSource
    from cdf_platform.core.errors import CdfNotEnabled as CdfNotEnabled
    from cdf_platform.core.errors import CdfPlatformError as CdfPlatformError
    from cdf_platform.core.errors import ConcurrentWriteConflict as ConcurrentWriteConflict
    from cdf_platform.core.errors import DataQualityError as DataQualityError
    from cdf_platform.core.errors import (
        DestructiveActionNotPermitted as DestructiveActionNotPermitted,
    )
    from cdf_platform.core.errors import EngineUnavailable as EngineUnavailable
    from cdf_platform.core.errors import IncompatibleSchemaChange as IncompatibleSchemaChange
    from cdf_platform.core.errors import InvalidAlertConfig as InvalidAlertConfig
    from cdf_platform.core.errors import InvalidPipelineSpec as InvalidPipelineSpec
    from cdf_platform.core.errors import InvalidRunConfig as InvalidRunConfig
    from cdf_platform.core.errors import InvalidStorageConfig as InvalidStorageConfig
    from cdf_platform.core.errors import MarksLost as MarksLost
    from cdf_platform.core.errors import RebuildNeedsOverride as RebuildNeedsOverride
    from cdf_platform.core.errors import ReplayWindowLost as ReplayWindowLost
    from cdf_platform.core.errors import RuntimeEnvironmentError as RuntimeEnvironmentError
    from cdf_platform.core.errors import SourceLogDamaged as SourceLogDamaged
    from cdf_platform.core.errors import SourceNotFound as SourceNotFound
    from cdf_platform.core.errors import SourceReset as SourceReset
    from cdf_platform.core.errors import SpecChanged as SpecChanged
    from cdf_platform.core.errors import SpecChangeRefused as SpecChangeRefused
    from cdf_platform.core.errors import StorageUnreachable as StorageUnreachable
    from cdf_platform.core.errors import TableNameNotLocated as TableNameNotLocated
    from cdf_platform.core.errors import TargetOwnershipConflict as TargetOwnershipConflict
    from cdf_platform.core.errors import UnknownReadFailure as UnknownReadFailure
    from cdf_platform.core.errors import UnsafeSparkConfig as UnsafeSparkConfig
    from cdf_platform.core.errors import VacuumRefused as VacuumRefused
    from cdf_platform.core.errors import VerificationRefused as VerificationRefused
    from cdf_platform.core.spec.event_spec import EventSpec as EventSpec
    from cdf_platform.core.spec.expectations import Expectation as Expectation
    from cdf_platform.core.spec.expectations import ExpectationAction as ExpectationAction
    from cdf_platform.core.spec.modes import ChangeSource as ChangeSource
    from cdf_platform.core.spec.modes import DeleteMode as DeleteMode
    from cdf_platform.core.spec.modes import FallbackMode as FallbackMode
    from cdf_platform.core.spec.modes import HistoryMode as HistoryMode
    from cdf_platform.core.spec.modes import OnSpecChange as OnSpecChange
    from cdf_platform.core.spec.modes import VerifyRepair as VerifyRepair
    from cdf_platform.core.spec.pipeline_spec import PipelineSpec as PipelineSpec
    from cdf_platform.definitions import build_defs as build_defs
    from cdf_platform.orchestration.component import CdfPipelinesComponent as CdfPipelinesComponent
    from cdf_platform.orchestration.io_manager.watermark_io_manager import (
        WatermarkIOManager as WatermarkIOManager,
    )
    from cdf_platform.orchestration.shared.resources import LakeLayout as LakeLayout
    from cdf_platform.orchestration.shared.spark_resource import SparkResource as SparkResource
    from cdf_platform.planning.status import PipelineStatus as PipelineStatus
    from cdf_platform.planning.status import WindowState as WindowState
    from cdf_platform.planning.status import pipeline_status as pipeline_status
    from cdf_platform.spark.read.batch import ChangeBatch as ChangeBatch
    from cdf_platform.spark.read.batch import MergeRows as MergeRows
    from cdf_platform.spark.read.batch import ReplaceRows as ReplaceRows
    from cdf_platform.spark.read.batch import TableWrite as TableWrite
