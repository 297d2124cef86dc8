"""The one Definitions entry point of cdf_platform (workspace.yaml and `dagster dev` load it).

Nothing runs at import: `defs` is loaded lazily by Dagster's tools. Loading reads the lake
layout from the environment (`CDF_LAKE_ROOT`, `CDF_CONTROL_ROOT`, `CDF_PIPELINES_FILE`,
`CDF_SPARK_MASTER`, as `dg.EnvVar` where set) and binds the pipelines file's specs: one silver
asset with its checks per pipeline, and every bronze table as an external asset
(`cdf_platform.orchestration.platform`; the Component builds the same from `defs.yaml`).
Nothing starts Spark until a run needs it. The demo has its own definitions
(`cdf_platform.demo.demo_definitions`).
"""

import hashlib
import logging
import os
from collections.abc import Collection, Sequence

import dagster as dg

from cdf_platform.core.config import LakeEnvironment, default_automation
from cdf_platform.orchestration.jobs.silver_jobs import INCREMENTAL_JOB
from cdf_platform.orchestration.platform import platform_defs
from cdf_platform.orchestration.shared.resources import LakeLayout, SparkResource


def build_defs(
    lake: LakeLayout | None = None,
    spark: SparkResource | None = None,
    *,
    bronze_written_here: Collection[dg.AssetKey] = (),
    consumers: Sequence[dg.AssetsDefinition] = (),
    automation: bool | None = None,
    allow_destructive: bool | None = None,
) -> dg.Definitions:
    """The platform's definitions for the pipelines `lake` lists.

    Args:
        lake: pipelines file, lake root and control tables (default: from the environment).
        spark: the Spark resource (default: from the environment).
        bronze_written_here: bronze asset keys that other definitions merged with these
            materialize (the demo's writers); every other bronze table is an external asset.
        consumers: your assets that read these tables through the watermark IO manager
            (docs/incremental-assets.md): they get silver's lag and replay-window
            checks, automatic repair of a lost window and a say in VACUUM.
        automation: the incremental and rebuild sensors, the checks schedule and the weekly
            verification start RUNNING (default: `$CDF_AUTOMATION`, on unless `off`).
        allow_destructive: run configs that destroy history or skip a guard may run
            (default: `$CDF_ALLOW_DESTRUCTIVE`, else no; docs/production.md).
    """
    lake = lake or LakeLayout.from_environment()
    resolved = lake.lake()
    return platform_defs(
        resolved.specs(),
        lake,
        spark,
        bronze_written_here=bronze_written_here,
        consumers=consumers,
        automation=default_automation() if automation is None else automation,
        allow_destructive=allow_destructive,
        alerts=resolved.alerts(),
    )


logger = logging.getLogger(__name__)

# The last `defs` built in this process, with what it read (`_load_key`).
_loaded: tuple[tuple[object, ...], dg.Definitions] | None = None


def _load_key() -> tuple[object, ...] | None:
    """What a load of `defs` reads besides the code: the working directory, the environment
    (the lake's layout, Spark's settings, the variables the pipelines file names) and the
    pipelines file's bytes. None when the file cannot be read here (each load reads it)."""
    path = LakeEnvironment.resolve().pipelines_file.value
    try:
        with open(path, "rb") as file:
            digest = hashlib.sha256(file.read()).hexdigest()
    except OSError:
        return None
    return (os.getcwd(), tuple(sorted(os.environ.items())), path, digest)


@dg.definitions
def defs() -> dg.Definitions:
    """The platform's definitions on the environment's lake (loaded by Dagster, not at import),
    built once per process for the same environment and pipelines file: a run forked from the
    warm run worker uses the worker's, already resolved (`warm_definitions`), instead of
    building and resolving them again (every pipeline's assets, checks, jobs and sensors)."""
    return _defs_for(_load_key())


def _defs_for(key: tuple[object, ...] | None) -> dg.Definitions:
    """`defs` for what a load reads now (`key`): the last built when it read the same."""
    global _loaded
    if key is not None and _loaded is not None and _loaded[0] == key:
        return _loaded[1]
    built = build_defs()
    if key is not None:
        _loaded = (key, built)
    return built


# What the last failed `warm_definitions` read (`_load_key`): the same fails again unread.
_failed: tuple[object, ...] | None = None


def warm_definitions() -> bool:
    """Build `defs` and resolve its repository and `incremental_job` in this process, unless
    built already for the same environment and pipelines file (the warm run worker, before it
    forks a run); False when they do not load (each run then fails on it as it would have),
    said once and not tried again until the file or the environment changes."""
    global _failed
    key = _load_key()
    if key is not None and key == _failed:
        return False
    try:
        _defs_for(key).get_repository_def().get_job(INCREMENTAL_JOB)  # most runs' job
    except Exception as err:  # an invalid pipelines file: the run says so, classified
        logger.warning("the definitions do not load in the run worker: %s", err)
        _failed = key
        return False
    _failed = None
    return True
