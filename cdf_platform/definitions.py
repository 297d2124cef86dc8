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
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource


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


class ProcessDefinitions:
    """The definitions a process built, kept for what they read (`_load_key`): `defs` returns
    the last built while the environment and the pipelines file are the same, and a warm-up
    that failed is not tried again until they change.

    Example:
        >>> loads = ProcessDefinitions()  # the same environment and file: built once
        >>> loads.of(_load_key()) is loads.of(_load_key())  # doctest: +SKIP
        True
    """

    def __init__(self) -> None:
        # The last definitions built, with the key of what they read.
        self._loaded: tuple[tuple[object, ...], dg.Definitions] | None = None
        # What the last failed `warm` read: the same fails again unread.
        self._failed: tuple[object, ...] | None = None

    def of(self, key: tuple[object, ...] | None) -> dg.Definitions:
        """The definitions for what a load reads now (`key`): the last built when it read the
        same, else built now (and kept unless `key` is None)."""
        if key is not None and self._loaded is not None and self._loaded[0] == key:
            return self._loaded[1]
        built = build_defs()
        if key is not None:
            self._loaded = (key, built)
        return built

    def warm(self) -> bool:
        """Build the definitions and resolve their repository and `incremental_job`, unless
        built already for the same environment and pipelines file; False when they do not
        load, said once and not tried again until the file or the environment changes."""
        key = _load_key()
        if key is not None and key == self._failed:
            return False
        try:
            self.of(key).get_repository_def().get_job(INCREMENTAL_JOB)  # most runs' job
        except Exception as err:  # an invalid pipelines file: the run says so, classified
            logger.warning("the definitions do not load in the run worker: %s", err)
            self._failed = key
            return False
        self._failed = None
        return True


# This process's: Dagster's loader calls `defs`, the warm run worker `warm_definitions`.
_PROCESS = ProcessDefinitions()


@dg.definitions
def defs() -> dg.Definitions:
    """The platform's definitions on the environment's lake (loaded by Dagster, not at import),
    built once per process for the same environment and pipelines file: a run forked from the
    warm run worker uses the worker's, already resolved (`warm_definitions`), instead of
    building and resolving them again (every pipeline's assets, checks, jobs and sensors)."""
    return _PROCESS.of(_load_key())


def warm_definitions() -> bool:
    """Build `defs` and resolve its repository and `incremental_job` in this process, unless
    built already for the same environment and pipelines file (the warm run worker, before it
    forks a run); False when they do not load (each run then fails on it as it would have),
    said once and not tried again until the file or the environment changes."""
    return _PROCESS.warm()
