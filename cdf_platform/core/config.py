"""Where things live: the environment variables that configure the platform and their embedded
defaults (local Spark, `./lake`, `<lake>/_control`, `./pipelines.yaml`).

Nothing here runs at import: the CLI reads the environment when a command runs, and the Dagster
definitions when they load (as `dg.EnvVar`, see `cdf_platform.orchestration.shared.resources`).

A lake or control root is resolved once, where it enters (a flag, a variable, a resource's
config), by `resolve_root`: every later step sees an absolute path or a URI.

Example:
    >>> resolve_root("s3://bucket/lake")
    's3://bucket/lake'
    >>> resolve_root("w/lake") == str(Path.cwd() / "w" / "lake")
    True
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cdf_platform.core.errors import RuntimeEnvironmentError

MASTER_ENV = "CDF_SPARK_MASTER"
REMOTE_ENV = "CDF_SPARK_REMOTE"
LAKE_ROOT_ENV = "CDF_LAKE_ROOT"
CONTROL_ROOT_ENV = "CDF_CONTROL_ROOT"
PIPELINES_FILE_ENV = "CDF_PIPELINES_FILE"
AUTOMATION_ENV = "CDF_AUTOMATION"
SPARK_LOG_ENV = "CDF_SPARK_LOG"
PIPELINES_PER_RUN_ENV = "CDF_PIPELINES_PER_RUN"
# An incremental run of a small SCD1 change set of at most this many change rows runs without
# Spark (`cdf_platform.run.jvm_free`); 0: every run is Spark's. Larger sets are read
# whole into the run's memory, and past a few thousand rows Spark's fixed cost is no longer
# the most of a run.
JVM_FREE_MERGE_MAX_ROWS_ENV = "CDF_JVM_FREE_MERGE_MAX_ROWS"
DEFAULT_JVM_FREE_MERGE_MAX_ROWS = 20_000
# host:port of the warm run worker (`cdf-platform run-worker`) the deployment's run launcher
# hands runs to.
RUN_WORKER_ENV = "CDF_RUN_WORKER"
# An operator's permission, in the environment of the code server and the run worker, for run
# configs that destroy history or skip a guard (`allow_destructive`); off unless set.
ALLOW_DESTRUCTIVE_ENV = "CDF_ALLOW_DESTRUCTIVE"
# Pipelines with small runs share a silver run (one process, one Spark driver): at most this
# many in one. A run's driver start (20-30 s of two cores) and its compiler's warm-up are paid
# once for all of them; a bronze commit to a pipeline whose step is done waits for the run's end.
DEFAULT_PIPELINES_PER_RUN = 50
DEFAULT_MASTER = "local[*]"
DEFAULT_PIPELINES_FILE = "pipelines.yaml"


def resolve_root(root: str) -> str:
    """`root` as the platform uses it: a URI (anything with `://`: `s3://`, `abfss://`, ...) as
    given, a local folder as its absolute, normalised path (relative: to the working directory).

    Spark reads `delta.`<path>`` in SQL as a path only when the path is absolute (a relative one
    is taken for a table in a schema named `delta`), so a relative root must never reach it.
    """
    if "://" in root:
        return root
    return os.path.abspath(root)


def embedded_lake_root() -> str:
    """`lake/` under the working directory (the project root when run through `dagster dev`,
    `make` or `cdf-platform`)."""
    return str(Path.cwd() / "lake")


def control_root_under(lake_root: str) -> str:
    """The control tables' default folder: `<lake root>/_control`."""
    return f"{lake_root.rstrip('/')}/_control"


@dataclass(frozen=True)
class Setting:
    """One setting's value and the environment variable it was read from (None: the value was
    given, or is the embedded default). The Dagster resources keep a variable's setting as a
    `dg.EnvVar`, so the UI names the variable and a run reads it when it starts."""

    value: str
    variable: str | None = None


def _setting(variable: str, given: str | None, default: str | None) -> Setting | None:
    if given:
        return Setting(given)
    read = os.environ.get(variable)
    if read:
        return Setting(read, variable)
    return None if default is None else Setting(default)


@dataclass(frozen=True)
class LakeEnvironment:
    """Where the lake, its control tables and its pipelines file are, and which Spark serves
    them: each the value given (a command-line flag), else its environment variable, else the
    embedded default. The one resolution of the environment: the command line takes the values,
    the Dagster resources (`LakeLayout.from_environment`, `SparkResource.from_environment`)
    keep the variables.

    Attributes:
        lake_root: `$CDF_LAKE_ROOT`, else `lake/` under the working directory (resolved,
            `resolve_root`).
        control_root: `$CDF_CONTROL_ROOT` (resolved), else None: `<lake root>/_control`.
        pipelines_file: `$CDF_PIPELINES_FILE`, else `pipelines.yaml` in the working directory.
        master: `$CDF_SPARK_MASTER`, else all local cores.
        remote: `$CDF_SPARK_REMOTE` (a Spark Connect URL, `sc://host:port`), else None: Spark
            runs in the process against `master`.

    Example:
        >>> env = LakeEnvironment.resolve(lake_root="s3://bucket/lake", control_root="s3://c")
        >>> env.lake_root.value, env.control_root_path, env.lake_root.variable
        ('s3://bucket/lake', 's3://c', None)
    """

    lake_root: Setting
    control_root: Setting | None
    pipelines_file: Setting
    master: Setting
    remote: Setting | None

    @classmethod
    def resolve(
        cls,
        *,
        lake_root: str | None = None,
        control_root: str | None = None,
        pipelines_file: str | None = None,
    ) -> LakeEnvironment:
        """The environment now, the values given taking precedence over the variables."""
        lake = _setting(LAKE_ROOT_ENV, lake_root, embedded_lake_root())
        control = _setting(CONTROL_ROOT_ENV, control_root, None)
        pipelines = _setting(PIPELINES_FILE_ENV, pipelines_file, DEFAULT_PIPELINES_FILE)
        master = _setting(MASTER_ENV, None, DEFAULT_MASTER)
        assert lake is not None and pipelines is not None and master is not None
        return cls(
            lake_root=Setting(resolve_root(lake.value), lake.variable),
            control_root=(
                None if control is None else Setting(resolve_root(control.value), control.variable)
            ),
            pipelines_file=pipelines,
            master=master,
            remote=_setting(REMOTE_ENV, None, None),
        )

    @property
    def control_root_path(self) -> str:
        """The control tables' folder: the control root, else `<lake root>/_control`."""
        if self.control_root is not None:
            return self.control_root.value
        return control_root_under(self.lake_root.value)


def default_automation() -> bool:
    """`$CDF_AUTOMATION` (`off`, `false`, `no` or `0` turn it off), else on: the incremental
    and rebuild sensors and the checks schedule start RUNNING."""
    value = (os.environ.get(AUTOMATION_ENV) or "on").strip().lower()
    return value not in ("off", "false", "0", "no")


def default_pipelines_per_run() -> int:
    """`$CDF_PIPELINES_PER_RUN`, else 50: at most this many pipelines with small change sets
    share one silver run (1: a run per pipeline).

    Raises:
        RuntimeEnvironmentError: the value is not a whole number of at least 1.
    """
    value = (os.environ.get(PIPELINES_PER_RUN_ENV) or str(DEFAULT_PIPELINES_PER_RUN)).strip()
    if not value.isdigit() or int(value) < 1:
        raise RuntimeEnvironmentError(
            f"{PIPELINES_PER_RUN_ENV}={value!r} is not a whole number of at least 1",
            action=f"set {PIPELINES_PER_RUN_ENV} to 1 or more "
            f"(default {DEFAULT_PIPELINES_PER_RUN})",
        )
    return int(value)


def jvm_free_merge_max_rows() -> int:
    """`$CDF_JVM_FREE_MERGE_MAX_ROWS`, else 20,000: the largest change set an incremental run
    applies without Spark (0: none).

    Raises:
        RuntimeEnvironmentError: the value is not a whole number.
    """
    default = str(DEFAULT_JVM_FREE_MERGE_MAX_ROWS)
    value = (os.environ.get(JVM_FREE_MERGE_MAX_ROWS_ENV) or default).strip()
    if not value.isdigit():
        raise RuntimeEnvironmentError(
            f"{JVM_FREE_MERGE_MAX_ROWS_ENV}={value!r} is not a whole number",
            action=f"set {JVM_FREE_MERGE_MAX_ROWS_ENV} to 0 (every run through Spark) or more "
            f"(default {DEFAULT_JVM_FREE_MERGE_MAX_ROWS})",
        )
    return int(value)


def default_allow_destructive() -> bool:
    """`$CDF_ALLOW_DESTRUCTIVE`: `1`, `true`, `yes` or `on` permit the run configs that destroy
    history or skip a guard (a maintenance run's `retain_zero` or `allow_window_loss`, a
    rebuild's `override_fail_fast`); unset, empty, `0`, `false`, `no` or `off` refuse them.

    Raises:
        RuntimeEnvironmentError: any other value (a typo must not read as either).
    """
    value = (os.environ.get(ALLOW_DESTRUCTIVE_ENV) or "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("", "0", "false", "no", "off"):
        return False
    raise RuntimeEnvironmentError(
        f"{ALLOW_DESTRUCTIVE_ENV}={value!r} is neither on nor off",
        action=f"set {ALLOW_DESTRUCTIVE_ENV} to 1 to permit destructive run configs, or unset "
        "it (the default) to refuse them",
    )


def default_spark_log() -> str:
    """`$CDF_SPARK_LOG`, else `cdf_platform/spark.log` in the system's temp folder: where the
    command line sends the console output of the JVM it starts (Ivy, log4j warnings)."""
    return os.environ.get(SPARK_LOG_ENV) or str(
        Path(tempfile.gettempdir()) / "cdf_platform" / "spark.log"
    )
