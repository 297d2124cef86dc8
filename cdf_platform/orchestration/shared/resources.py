"""The lake's Dagster resource: where the lake and its pipelines are and how its object stores
are reached (`LakeLayout`, whose `lake()` is the `Lake` value every platform step is handed).
The Spark resource is `cdf_platform.orchestration.shared.spark_resource`.

`from_environment()` builds it from the environment when the definitions load (never at
import): a field whose variable is set is a `dg.EnvVar` (the UI shows the variable's name, and a
run reads its value when it starts), the others take the embedded defaults. A relative lake or
control root (a literal, or an `EnvVar`'s value when it is read) is resolved once to its
absolute path (`cdf_platform.core.config.resolve_root`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import Any, cast

import dagster as dg
from pydantic import Field, PrivateAttr, field_validator

from cdf_platform.core.config import (
    CONTROL_ROOT_ENV,
    LAKE_ROOT_ENV,
    PIPELINES_FILE_ENV,
    LakeEnvironment,
    Setting,
    resolve_root,
)
from cdf_platform.core.errors import CdfPlatformError, InvalidPipelineSpec
from cdf_platform.core.lake import Lake
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import ParsedFiles, find_spec
from cdf_platform.core.storage import StorageConfig
from cdf_platform.orchestration.shared.storage_options_config import StorageOptionsConfig
from cdf_platform.planning.assessment import ControlReads
from cdf_platform.state.control import ControlTable

logger = logging.getLogger(__name__)


def env_field(setting: Setting) -> str:
    """A resource field's value for `setting`: `dg.EnvVar` of the variable it was read from,
    else its value."""
    return dg.EnvVar(setting.variable) if setting.variable else setting.value


def _read_env(field: str, value: Any) -> Any:
    """The value of `value`'s variable when it is a `dg.EnvVar`, else `value` itself.

    Raises:
        InvalidPipelineSpec: the variable is not set.
    """
    if not isinstance(value, dg.EnvVar):
        return value
    read = os.environ.get(value.env_var_name)
    if read is None:
        raise InvalidPipelineSpec(
            f"the lake layout's {field} reads ${value.env_var_name}, which is not set",
            action=f"set {value.env_var_name}, or give {field} a value",
        )
    return read


class RunControls:
    """The control tables of each run in progress, by run id, shared by every copy Dagster
    makes of one `LakeLayout` for the run (the assets' and checks' `lake`, the watermark IO
    manager's): one `ControlTable` per run, its writes held from the first copy's setup to the
    last copy's teardown, so the run's steps read what the steps before them wrote and the
    rows go to the tables together."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, tuple[ControlTable, int]] = {}

    def acquire(self, run_id: str, lake: Lake) -> ControlTable:
        """The control tables of run `run_id` (of `lake`), holding their writes."""
        with self._lock:
            control, users = self._runs.get(run_id) or (None, 0)
            if control is None:
                control = ControlTable(lake.control_root, storage=lake.storage)
                control.hold_writes()
            self._runs[run_id] = (control, users + 1)
            return control

    def release(self, run_id: str) -> ControlTable | None:
        """End one `acquire` of run `run_id`; the last returns its control tables (their
        writes still held: the caller writes them)."""
        with self._lock:
            control, users = self._runs.pop(run_id, (None, 0))
            if control is not None and users > 1:
                self._runs[run_id] = (control, users - 1)
                return None
            return control


class LakeLayout(dg.ConfigurableResource):
    """The pipelines file, the lake root it is resolved against, the control tables, and the
    object-store options of the lake's locations (`storage`, beside the pipelines file's
    `storage:` section).

    Example:
        >>> layout = LakeLayout(lake_root="/lake", pipelines_file="pipelines.yaml")
        >>> layout.spec("orders").target  # doctest: +SKIP
        '/lake/silver/orders'
        >>> layout.control().read_states()  # doctest: +SKIP
        {'orders': {...}}
        >>> LakeLayout(  # doctest: +SKIP
        ...     lake_root="s3://lake-a/lake",
        ...     storage={"s3://lake-a": StorageOptionsConfig(
        ...         endpoint="https://minio.internal:9000",
        ...         secret_access_key=dg.EnvVar("LAKE_A_SECRET"), ...)},
        ... )
    """

    lake_root: str = Field(
        description="Folder (or URI) that relative `source`/`target` locations of the pipelines "
        f"file are resolved against (${LAKE_ROOT_ENV}; default ./lake). A relative folder is "
        "taken from the working directory and made absolute once."
    )
    control_root: str | None = Field(
        default=None,
        description=f"Folder of the control tables (pipeline_state, load_log) (${CONTROL_ROOT_ENV};"
        " default <lake_root>/_control).",
    )
    pipelines_file: str | None = Field(
        default=None,
        description=f"The pipelines YAML file (${PIPELINES_FILE_ENV}; default ./pipelines.yaml); "
        "None when the pipelines are declared in a Component's defs.yaml.",
    )
    storage: dict[str, StorageOptionsConfig] = Field(
        default_factory=dict,
        description="Object-store options by location prefix (s3://bucket, "
        "abfss://container@account.dfs.core.windows.net/lake, ...): endpoint, region, "
        "credentials (dg.EnvVar). The longest prefix matching a location wins; what is unset, "
        "and locations no prefix matches, come from the environment (AWS_*, AZURE_STORAGE_*, "
        "GOOGLE_*). Added to the pipelines file's `storage:` section; a prefix may be in one "
        "of the two only.",
    )
    # The pipelines file's documents as parsed, shared with every copy Dagster makes of this
    # layout for a run or a sensor tick (`_with_updated_values`): each reads the file, and
    # parses it again only when its text changed.
    _parsed: ParsedFiles = PrivateAttr(default_factory=ParsedFiles)
    # The lake this layout stands for, built on first use (`lake()`).
    _lake: Lake | None = PrivateAttr(default=None)
    # Its control tables, opened on first use (`control()`) and kept for the resource's life
    # (a run, a tick): each of a shared run's steps reads and writes them.
    _control: ControlTable | None = PrivateAttr(default=None)
    # The control tables' rows as first read for a run's steps (`run_control_reads()`).
    _run_reads: ControlReads | None = PrivateAttr(default=None)
    # The control tables of each run in progress, shared with every copy of this layout.
    _run_controls: RunControls = PrivateAttr(default_factory=RunControls)
    # The run whose control tables this copy took from `_run_controls` at its setup.
    _run_id: str | None = PrivateAttr(default=None)

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def _with_updated_values(self, values: Mapping[str, Any] | None) -> LakeLayout:
        # Dagster 1.13 initializes a resource for each run and sensor tick through copies made
        # here (`ConfigurableResourceFactory._with_updated_values`: a new object, private
        # attributes at their defaults); the copies keep this layout's parsed pipelines file.
        copy = cast(LakeLayout, super()._with_updated_values(values))
        copy._parsed = self._parsed
        copy._run_controls = self._run_controls
        return copy

    @field_validator("lake_root", "control_root", "pipelines_file", mode="before")
    @classmethod
    def _resolve(cls, value: object) -> object:
        # Before Dagster reads it, an `EnvVar` holds the variable's name, not a path: it is
        # resolved when the bound layout is built from the value (`bound()`, a run's start).
        if isinstance(value, str) and value and not isinstance(value, dg.EnvVar):
            return resolve_root(value)
        return value

    @classmethod
    def from_environment(cls) -> LakeLayout:
        """The layout the environment configures (see the module docstring)."""
        env = LakeEnvironment.resolve()
        return cls(
            lake_root=env_field(env.lake_root),
            control_root=env_field(env.control_root) if env.control_root else None,
            pipelines_file=env_field(env.pipelines_file),
        )

    def bound(self) -> LakeLayout:
        """This layout with its `dg.EnvVar` fields read now (what a run would see).

        The variables are read here rather than through Dagster's
        `process_config_and_initialize`, which builds an ephemeral instance (in-memory
        storages and their migrations) on every call: a tenth of a second of each definitions
        load, in the code server and in every run process.

        Raises:
            InvalidStorageConfig: a `dg.EnvVar` of `storage` names a variable that is not set.
            InvalidPipelineSpec: a `dg.EnvVar` of the lake root, control root or pipelines
                file names a variable that is not set.
        """
        roots = {
            name: _read_env(name, getattr(self, name))
            for name in ("lake_root", "control_root", "pipelines_file")
        }
        # The pipelines file's storage section as well as this resource's: the error names the
        # prefix and the variable.
        read = LakeLayout(**roots, storage=self.storage)
        read._parsed = self._parsed
        read.storage_config().resolved(os.environ)
        bound = LakeLayout(
            **roots,
            storage={
                prefix: StorageOptionsConfig(
                    **{name: _read_env(name, value) for name, value in options}
                )
                for prefix, options in self.storage.items()
            },
        )
        bound._parsed = self._parsed
        return bound

    def _resource_storage(self) -> StorageConfig:
        """This resource's `storage` as the platform's configuration (a `dg.EnvVar` not read
        yet as a reference to its variable)."""
        return StorageOptionsConfig.to_config(self.storage, "the lake resource's storage")

    def storage_config(self) -> StorageConfig:
        """The object-store options of the lake as the lake merges them
        (`Lake.configured_storage`: the pipelines file's `storage:` section, when the file
        exists, and this resource's `storage`), their environment references not read yet.

        Raises:
            InvalidStorageConfig: a malformed entry, or a prefix configured in both.
            InvalidPipelineSpec: the pipelines file is not YAML, or its `dg.EnvVar` is not set.
        """
        file = _read_env("pipelines_file", self.pipelines_file)
        return Lake.configured_storage(file, self._resource_storage(), parsed=self._parsed)

    def lake(self) -> Lake:
        """The lake this layout stands for (`Lake.load`): its `dg.EnvVar` fields and its
        storage options' environment references read now, once per resource.

        Raises:
            InvalidStorageConfig: see `storage_config`, or a referenced variable is not set.
            InvalidPipelineSpec: a root or the pipelines file reads a variable that is not
                set, or the pipelines file is not YAML.
        """
        if self._lake is None:
            roots = {
                name: _read_env(name, getattr(self, name))
                for name in ("lake_root", "control_root", "pipelines_file")
            }
            self._lake = Lake.load(**roots, storage=self._resource_storage(), parsed=self._parsed)
        return self._lake

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A run, check or sensor that uses the lake fails at its start when the lake's
        storage options are invalid or read a variable that is not set. In a run, the
        control tables are the run's (`RunControls`), their state and load-log writes held and
        written together (`ControlTable.hold_writes`): a shared run of many pipelines makes
        one commit of each where it made two per pipeline."""
        lake = self.lake()
        run_id = context.run.run_id if context.run is not None else None
        if run_id is not None:
            self._control = self._run_controls.acquire(run_id, lake)
            self._run_id = run_id

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """At the end of a run, its last copy of the layout writes the control rows held. A
        classified failure to write them (the store unreachable) is logged, not raised:
        silver's commits are made, and each pipeline's next run records what they applied from
        silver's log (`run.record.repair_control`)."""
        run_id, self._run_id = self._run_id, None
        control = self._run_controls.release(run_id) if run_id is not None else None
        if control is None:
            return
        try:
            control.release_writes()
        except CdfPlatformError as err:
            log = context.log if context.log is not None else logger
            log.warning(
                f"the control rows of this run were not written ({err}); each pipeline's next "
                "run records what silver holds from silver's log"
            )

    def control(self) -> ControlTable:
        """The control tables (state and load log), carrying the lake's object-store options
        to every reader they are handed to: one object for this resource, which keeps the
        tables it opened up to date rather than opening them again (`ControlTable`)."""
        if self._control is None:
            lake = self.lake()
            self._control = ControlTable(lake.control_root, storage=lake.storage)
        return self._control

    def run_control_reads(self) -> ControlReads:
        """The control tables' rows every pipeline's status needs (`ControlReads`), read at the
        first call and kept for the resource's life: Dagster builds the resource for each run,
        so a run whose steps write no control row (a checks run) reads them once, not once per
        pipeline (each read returns every pipeline's row)."""
        if self._run_reads is None:
            self._run_reads = ControlReads.of(self.control())
        return self._run_reads

    def specs(self) -> list[PipelineSpec]:
        """Every pipeline of the pipelines file, locations resolved under the lake root.

        Raises:
            InvalidPipelineSpec: the file is missing or holds an invalid spec, or the layout
                names no file (the pipelines are declared in a Component's defs.yaml).
        """
        return self.lake().specs()

    def spec(self, pipeline_id: str) -> PipelineSpec:
        """The resolved spec of `pipeline_id`.

        Raises:
            InvalidPipelineSpec: no such pipeline (or the file is invalid).
        """
        return find_spec(self.specs(), pipeline_id)

    def storage_locations(self) -> list[str]:
        """Every location the pipelines touch: lake and control roots, sources and targets."""
        return self.lake().storage_locations(self.specs())

    def table_path(self, layer: str, table: str) -> str:
        """Where a platform-owned table `layer/table` (e.g. gold/...) lives under the lake."""
        return f"{self.lake_root.rstrip('/')}/{layer}/{table}"
