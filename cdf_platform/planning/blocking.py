"""The blocking problems of a pipeline's assessment (`cdf_platform.planning.assessment`): what a
person must fix before a run can start, since a rebuild would not help. They are looked for in
the order a run meets them: bronze missing or its log damaged, bronze managed by a catalog, a
target owned by another pipeline or holding other files, a bronze column named like one the
platform adds, the change feed off before the first load.

Example:
    >>> found = source_window(spec, silver, now)  # doctest: +SKIP
    >>> isinstance(found, Blocked) and found.problem.incident_code  # doctest: +SKIP
    'SOURCE_NOT_FOUND'
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from cdf_platform.core.errors import (
    CatalogManagedSource,
    CdfNotEnabled,
    CdfPlatformError,
    InvalidPipelineSpec,
    SourceLogDamaged,
    SourceNotFound,
    TargetOwnershipConflict,
    foreign_files_at_target,
)
from cdf_platform.core.spec.pipeline_spec import CDF_COLUMNS, RESERVED_COLUMNS, PipelineSpec
from cdf_platform.core.storage import StorageConfig
from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.deltalog.tables import holds_foreign_files
from cdf_platform.state.watermark import SilverState
from cdf_platform.window.replay_window import ReplayWindow, compute_replay_window

# The table feature of catalog-managed tables (Delta protocol, "Catalog-managed tables"): a
# path-based reader must refuse them. Delta 4.0-4.1 wrote the preview name.
CATALOG_MANAGED_FEATURES = ("catalogManaged", "catalogOwned-preview")


@dataclass(frozen=True)
class Blocked:
    """A blocking problem, and bronze's replay window when it was read before the problem was
    found (None when bronze's log could not be read, or the problem came first)."""

    problem: CdfPlatformError
    window: ReplayWindow | None = None


def source_window(
    spec: PipelineSpec, silver: SilverState, now: datetime, storage: StorageConfig
) -> ReplayWindow | Blocked:
    """Bronze's replay window at `now`, from its log listed once, or the first blocking problem
    (`silver`: silver's log, for its owner and watermark; `storage`: the lake's object-store
    options, to read the locations with)."""
    log = _source_log(spec, storage)
    if isinstance(log, Blocked):
        return log
    ownership = _ownership_problem(spec, silver, storage)
    if ownership is not None:
        return Blocked(ownership)
    try:
        window = compute_replay_window(spec.source, now=now, log=log)
    except SourceLogDamaged as err:
        return Blocked(_damaged_source(spec, err))
    invalid = colliding_columns_problem(spec, window)
    if invalid is not None:
        return Blocked(invalid, window)
    needs_feed = spec.changes.replays_history  # a snapshot source reads no change feed
    if silver.watermark is None and not window.cdf_enabled_at_latest and needs_feed:
        off = CdfNotEnabled(
            "the change feed is off on the source, so silver could not follow it",
            pipeline_id=spec.id,
            table=spec.source,
        )
        return Blocked(off, window)
    return window


def _source_log(spec: PipelineSpec, storage: StorageConfig) -> DeltaLog | Blocked:
    """Bronze's log (the one listing of it an assessment makes), or why it cannot be read:
    bronze missing, its log damaged, or its table managed by a catalog."""
    try:
        log = DeltaLog(spec.source, storage)
    except SourceNotFound as err:
        missing = SourceNotFound(
            f"no Delta table at {spec.source} ({err.problem})",
            pipeline_id=spec.id,
            table=spec.source,
        )
        return Blocked(missing)
    try:
        protocol = log.latest_protocol()
    except SourceLogDamaged as err:
        return Blocked(_damaged_source(spec, err))
    if managed := [name for name in CATALOG_MANAGED_FEATURES if protocol.has_feature(name)]:
        catalog = CatalogManagedSource(
            f"the source's protocol has the {managed[0]!r} table feature",
            pipeline_id=spec.id,
            table=spec.source,
        )
        return Blocked(catalog)
    return log


def _ownership_problem(
    spec: PipelineSpec, silver: SilverState, storage: StorageConfig
) -> CdfPlatformError | None:
    """Silver owned by another pipeline (or not created by the platform), or files at a target
    that holds no silver yet; None where the target is this pipeline's to write."""
    if silver.exists and silver.owner != spec.id:
        return TargetOwnershipConflict(
            f"silver table is owned by {silver.owner!r}"
            if silver.owner
            else "silver table exists but was not created by cdf_platform",
            pipeline_id=spec.id,
            table=spec.target,
        )
    if not silver.exists and holds_foreign_files(spec.target, storage):
        return foreign_files_at_target(spec.id, spec.target)
    return None


def colliding_columns_problem(
    spec: PipelineSpec, window: ReplayWindow
) -> InvalidPipelineSpec | None:
    """A bronze column named like one the change feed or silver adds, or None.

    Delta's change feed adds `_change_type`, `_commit_version` and `_commit_timestamp` to every
    row, and silver adds `_source_commit_version`, `_is_deleted` and `_deleted_at`: a bronze
    column of the same name would be shadowed or collide, so it is refused before any read.
    """
    schema = window.log.schema_at(window.latest_version) or {}
    fields = schema.get("fields", [])
    columns = (
        [str(f["name"]) for f in fields if isinstance(f, dict)] if isinstance(fields, list) else []
    )
    copied = set(spec.include_columns) if spec.include_columns is not None else set(columns)
    colliding = [c for c in columns if c in CDF_COLUMNS or (c in RESERVED_COLUMNS and c in copied)]
    if not colliding:
        return None
    return InvalidPipelineSpec(
        f"bronze columns {colliding} are named like columns the change feed or silver adds "
        f"({sorted(CDF_COLUMNS | RESERVED_COLUMNS)})",
        pipeline_id=spec.id,
        table=spec.source,
        action="rename the bronze column (a silver column name can also be left out with "
        "`include_columns`)",
    )


def _damaged_source(spec: PipelineSpec, err: SourceLogDamaged) -> SourceLogDamaged:
    """`err` (the log reader's) as the pipeline's: its problem and action, naming the pipeline
    and its `source`."""
    return SourceLogDamaged(err.problem, pipeline_id=spec.id, table=spec.source, action=err.action)
