"""`Lake`: one lake as a front door resolves it, once: where it is, where its control tables
and pipelines file are, how its object stores are reached and which Spark serves it.

The command line, the Dagster definitions (`LakeLayout.lake`, the Component) and the demo each
build one and pass it down: the storage options travel with the lake (`ControlTable.storage`,
`SparkSettings.storage`) to every reader of a location, so two lakes with different stores can
live in one process.

Example:
    >>> lake = Lake.load(lake_root="s3://lake-a/lake")
    >>> lake.control_root
    's3://lake-a/lake/_control'
    >>> lake.storage.entry_for("s3://lake-a/lake/bronze/orders") is None
    True
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cdf_platform.core.alert_config import AlertConfig
from cdf_platform.core.config import (
    DEFAULT_MASTER,
    PIPELINES_FILE_ENV,
    LakeEnvironment,
    control_root_under,
    resolve_root,
)
from cdf_platform.core.errors import InvalidPipelineSpec
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import ParsedFiles, load_alerts, load_specs, load_storage
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig, is_table_name


def storage_locations(specs: Iterable[PipelineSpec], *roots: str) -> list[str]:
    """`roots` (lake and control roots) and every source and target of `specs` given as a path:
    what a Spark session for these pipelines reads and writes (a catalog name's location is
    the catalog's to know)."""
    locations = (location for spec in specs for location in (spec.source, spec.target))
    return [*roots, *(location for location in locations if not is_table_name(location))]


@dataclass(frozen=True)
class Lake:
    """A lake's roots, pipelines file, object-store options and Spark, resolved.

    Attributes:
        lake_root: The folder or URI relative `source`/`target` locations are resolved against
            (absolute, `resolve_root`).
        control_root: The control tables' folder (absolute).
        pipelines_file: The pipelines YAML file; None when the pipelines are declared
            elsewhere (a Component's defs.yaml).
        storage: The object-store options of the lake's locations, `{env: NAME}` values read:
            the pipelines file's `storage:` section and the ones given (the lake resource's).
        master: The Spark master URL a session started in the process uses.
        remote: A Spark Connect URL, or None: Spark runs in the process.
        parsed: The pipelines file's documents as parsed (`ParsedFiles`): the file is read for
            each of its sections, its text parsed once.
    """

    lake_root: str
    control_root: str
    pipelines_file: str | None = None
    storage: StorageConfig = ENVIRONMENT_ONLY
    master: str = DEFAULT_MASTER
    remote: str | None = None
    parsed: ParsedFiles = field(default_factory=ParsedFiles, compare=False, repr=False)

    @classmethod
    def load(
        cls,
        *,
        lake_root: str,
        control_root: str | None = None,
        pipelines_file: str | None = None,
        storage: StorageConfig = ENVIRONMENT_ONLY,
        master: str = DEFAULT_MASTER,
        remote: str | None = None,
        environ: Mapping[str, str] | None = None,
        parsed: ParsedFiles | None = None,
    ) -> Lake:
        """The lake these values describe: roots resolved, its object-store options as
        configured (`configured_storage`: the pipelines file's `storage:` section and
        `storage`) with their references read from `environ` (default: the process
        environment); `parsed`: the pipelines file's documents the caller keeps (default: the
        lake's own).

        Raises:
            InvalidStorageConfig: a malformed entry, a prefix configured in both, or a
                referenced variable that is not set.
            InvalidPipelineSpec: the pipelines file is not YAML.
        """
        root = resolve_root(lake_root)
        parsed = parsed if parsed is not None else ParsedFiles()
        configured = cls.configured_storage(pipelines_file, storage, parsed=parsed)
        return cls(
            lake_root=root,
            control_root=resolve_root(control_root) if control_root else control_root_under(root),
            pipelines_file=pipelines_file,
            storage=configured.resolved(os.environ if environ is None else environ),
            master=master,
            remote=remote,
            parsed=parsed,
        )

    @staticmethod
    def configured_storage(
        pipelines_file: str | None,
        storage: StorageConfig = ENVIRONMENT_ONLY,
        *,
        parsed: ParsedFiles | None = None,
    ) -> StorageConfig:
        """A lake's object-store options as configured, their `{env: NAME}` values unread: the
        pipelines file's `storage:` section (when the file exists: a lake whose pipelines are
        declared in a Component's defs.yaml has none) and `storage` (the lake resource's),
        each prefix in one of the two only; `parsed`: the parsed documents to read the file
        through (default: a parse of its own).

        The one place the two are merged: `load` reads the references of its result, and the
        lake resource shows them as they are written (`LakeLayout.storage_config`).

        Raises:
            InvalidStorageConfig: a malformed entry, or a prefix configured in both.
            InvalidPipelineSpec: the pipelines file is not YAML.
        """
        from_file = ENVIRONMENT_ONLY
        if pipelines_file is not None and Path(pipelines_file).is_file():
            from_file = load_storage(pipelines_file, parsed=parsed)
        return from_file.merged(storage)

    @classmethod
    def from_environment(
        cls,
        *,
        lake_root: str | None = None,
        control_root: str | None = None,
        pipelines_file: str | None = None,
        storage: StorageConfig = ENVIRONMENT_ONLY,
    ) -> Lake:
        """The lake the environment configures, the values given taking precedence over
        their variables (`LakeEnvironment`); `storage`: options besides the pipelines file's.

        Raises:
            InvalidStorageConfig, InvalidPipelineSpec: see `load`.
        """
        env = LakeEnvironment.resolve(
            lake_root=lake_root, control_root=control_root, pipelines_file=pipelines_file
        )
        return cls.load(
            lake_root=env.lake_root.value,
            control_root=env.control_root_path,
            pipelines_file=env.pipelines_file.value,
            storage=storage,
            master=env.master.value,
            remote=env.remote.value if env.remote else None,
        )

    def specs(self) -> list[PipelineSpec]:
        """Every pipeline of the pipelines file, locations resolved under the lake root.

        Raises:
            InvalidPipelineSpec: the file is missing or holds an invalid spec, or the lake
                names no file (its pipelines are declared in a Component's defs.yaml).
        """
        if self.pipelines_file is None:
            raise InvalidPipelineSpec(
                "this lake names no pipelines file",
                action="read the pipelines from the Component's defs.yaml, or set "
                f"pipelines_file (${PIPELINES_FILE_ENV})",
            )
        return load_specs(self.pipelines_file, lake_root=self.lake_root, parsed=self.parsed)

    def alerts(self) -> AlertConfig | None:
        """The pipelines file's `alerts:` section (None: no file, or no section), its
        `{env: NAME}` values unread.

        Raises:
            InvalidAlertConfig: the section is malformed.
            InvalidPipelineSpec: the file is not YAML.
        """
        if self.pipelines_file is None or not Path(self.pipelines_file).is_file():
            return None
        return load_alerts(self.pipelines_file, parsed=self.parsed)

    def storage_locations(self, specs: list[PipelineSpec]) -> list[str]:
        """Every location `specs` touch: lake and control roots, sources and targets."""
        return storage_locations(specs, self.lake_root, self.control_root)
