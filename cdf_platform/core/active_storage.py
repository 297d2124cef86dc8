"""The storage configuration this process uses, and the one place a location's options are
looked up (`options_for`).

Locations travel through every layer as plain strings (a spec's `source`, a control root), and
their options belong to the location, not to the caller: like the environment they fall back
to, they are one setting of the process. They are put in use where configuration enters, as
roots are resolved there (`cdf_platform.core.config.resolve_root`): the command line after
reading the pipelines file, the Dagster definitions when they load, and the lake resource when
a run, check or sensor initialises it. Every reader of a location asks `options_for`: the
JVM-free storage layer (`cdf_platform.deltalog.storage`), every `deltalake` table opener
(`cdf_platform.deltalog.delta_tables`) and the Spark session's connector conf
(`cdf_platform.spark.object_stores`).

Example:
    >>> previous = use_storage_config(
    ...     StorageConfig.parse({"s3://lake-a": {"region": "eu-west-1"}}, origin="example")
    ... )
    >>> options_for("s3://lake-a/bronze/orders").deltalake_options()
    {'aws_region': 'eu-west-1'}
    >>> options_for("/lake/bronze/orders") is None
    True
    >>> _ = use_storage_config(previous)
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from cdf_platform.core.storage_options import StorageConfig, StorageEntry

_in_use = StorageConfig()


def use_storage_config(
    config: StorageConfig, environ: Mapping[str, str] | None = None
) -> StorageConfig:
    """Put `config` in use for this process, its `{env: NAME}` values read now from `environ`
    (default: the process environment); return the configuration it replaces.

    Raises:
        InvalidStorageConfig: a referenced variable is not set (nothing is replaced then).
    """
    global _in_use
    resolved = config.resolved(os.environ if environ is None else environ)
    previous, _in_use = _in_use, resolved
    return previous


def storage_config_in_use() -> StorageConfig:
    """The configuration in use (resolved), empty until one is put in use."""
    return _in_use


def options_for(location: str) -> StorageEntry | None:
    """The configured options of `location` (longest matching prefix), or None: a local path,
    or a location whose store reads the environment's settings alone."""
    return _in_use.entry_for(location)
