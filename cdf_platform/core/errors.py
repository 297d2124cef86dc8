"""The error taxonomy of cdf_platform.

Every failure the platform can name is a class here. Each carries the facts an operator needs
(pipeline, table, versions) and a message that ends with what to do about it. Callers branch on
the class, never on the message.

Example:
    >>> try:
    ...     raise ReplayWindowLost("bronze CDF range (41, 190] is gone", pipeline_id="orders",
    ...                            table="/lake/bronze/orders", version=42,
    ...                            action="run `cdf-platform rebuild orders`")
    ... except CdfPlatformError as err:
    ...     err.incident_code
    'WATERMARK_OUTSIDE_RETENTION'
"""

from __future__ import annotations


class CdfPlatformError(Exception):
    """Base class: a failure the platform recognises, with the action that resolves it."""

    incident_code: str = "ERROR"
    default_action: str = "see the message above"
    # Whether running the same thing again may succeed (a transient conflict or outage); every
    # other class would fail the same way until something named in its action changes.
    retryable: bool = False

    def __init__(
        self,
        problem: str,
        *,
        pipeline_id: str | None = None,
        table: str | None = None,
        version: int | None = None,
        action: str | None = None,
    ) -> None:
        self.problem = problem
        self.pipeline_id = pipeline_id
        self.table = table
        self.version = version
        self.action = action or self.default_action
        super().__init__(self._render())

    def resolved_by(self, action: str) -> CdfPlatformError:
        """This error, its action replaced (the same failure calls for another remedy where the
        consumer is not a pipeline's silver); returns self."""
        self.action = action
        self.args = (self._render(),)
        return self

    def _render(self) -> str:
        facts = [
            f"{name}={value}"
            for name, value in (
                ("pipeline", self.pipeline_id),
                ("table", self.table),
                ("version", self.version),
            )
            if value is not None
        ]
        where = f" [{', '.join(facts)}]" if facts else ""
        # A problem or action quoted from elsewhere may end a sentence of its own.
        problem, action = self.problem.rstrip(". "), self.action.rstrip(". ")
        return f"{type(self).__name__}{where}: {problem}. What to do: {action}."


# The fix an InvalidPipelineSpec about a spec field names.
FIX_SPEC_FIELD = "fix the named field (see the PipelineSpec reference, docs/pipeline-spec.md)"


class InvalidPipelineSpec(CdfPlatformError):
    """A pipeline spec (YAML or code) is malformed or unsafe."""

    incident_code = "INVALID_PIPELINE_SPEC"
    default_action = "fix the named field in the pipelines file"


class SourceNotFound(CdfPlatformError):
    """The bronze source is missing or is not a Delta table."""

    incident_code = "SOURCE_NOT_FOUND"
    default_action = "check the `source` path or table name, and that the table was created"


class SourceLogDamaged(CdfPlatformError):
    """A table's current state cannot be built from its log: a commit file is gone and no
    checkpoint or checksum after it records the protocol or metadata, or a commit file holds
    something other than Delta actions."""

    incident_code = "SOURCE_LOG_DAMAGED"
    default_action = (
        "restore the missing commit files of the source's _delta_log from a backup, or recreate "
        "the source table; silver is left as it is until then"
    )


class TableNameNotLocated(CdfPlatformError):
    """A catalog table name with no location recorded yet: the JVM-free parts (status, checks,
    sensors) cannot ask the catalog, and no run of the pipeline has asked it since it was named."""

    incident_code = "TABLE_NAME_NOT_LOCATED"
    default_action = (
        "run the pipeline once (`cdf-platform run <id>` or materialize its silver asset): the run "
        "asks Spark's catalog and records the location"
    )


class CatalogManagedSource(CdfPlatformError):
    """The bronze table has the `catalogManaged` feature: its catalog owns its commits, and the
    Delta protocol forbids reading it by path (its `_delta_log` alone is not the table)."""

    incident_code = "CATALOG_MANAGED_SOURCE"
    default_action = (
        "point `source` at a path-based Delta table: cdf_platform reads bronze by path, and a "
        "catalog-managed table may only be read through its catalog"
    )


class CdfNotEnabled(CdfPlatformError):
    """The bronze source does not have `delta.enableChangeDataFeed` on for the needed range."""

    incident_code = "CDF_NOT_ENABLED"
    default_action = (
        "run ALTER TABLE ... SET TBLPROPERTIES (delta.enableChangeDataFeed = true) on the source, "
        "then rebuild the pipeline (`cdf-platform rebuild <id>`); or, for a table whose change "
        "feed stays off, set `changes: snapshots` on the pipeline (each run then reads and "
        "reconciles the whole table)"
    )


class ReplayWindowLost(CdfPlatformError):
    """The versions after the watermark can no longer be replayed from the change feed."""

    incident_code = "WATERMARK_OUTSIDE_RETENTION"
    default_action = (
        "rebuild silver from a pinned bronze snapshot (`cdf-platform rebuild <id>`), then raise "
        "delta.deletedFileRetentionDuration on the source above the consumer's longest pause"
    )


class SourceReset(CdfPlatformError):
    """The bronze table was recreated (new table id) or its latest version is below the
    watermark."""

    incident_code = "SOURCE_RESET"
    default_action = "confirm the source was recreated on purpose, then `cdf-platform rebuild <id>`"


class IncompatibleSchemaChange(CdfPlatformError):
    """A column was dropped, renamed or retyped in the range to replay (a type widening too: the
    change feed cannot be read across it), or silver cannot take a column's new type."""

    incident_code = "INCOMPATIBLE_SCHEMA_CHANGE"
    default_action = (
        "rebuild silver from the new bronze schema (`cdf-platform rebuild <id>`): it widens a "
        "silver column bronze widened, and refuses any other type change until the pipeline's "
        "`columns` casts the column back to silver's type or silver is moved away (its message "
        "names both); gold consumers of the dropped or renamed column must be updated too"
    )


class DataQualityError(CdfPlatformError):
    """Bronze holds a null key, or two surviving rows for one key in one commit, or a row
    failing an expectation whose action is `fail`."""

    incident_code = "DATA_QUALITY"
    default_action = (
        "fix the named key in the bronze table (remove the duplicate or null-key row), or correct "
        "the pipeline's `keys`, then rerun"
    )


class SpecChanged(CdfPlatformError):
    """The pipeline's row-shaping fields (`where`, `columns`, `keys`, ...) changed since silver
    was written: silver no longer is its spec applied to bronze until it is reconciled."""

    incident_code = "SPEC_CHANGED"
    default_action = (
        "run `cdf-platform rebuild <id>` (or the rebuild job with `override_fail_fast: true`) to "
        "reconcile silver with a pinned bronze snapshot under the new spec; or set "
        "`on_spec_change: forward_only` to apply the edit to new changes only; or restore the "
        "previous spec"
    )


class SpecChangeRefused(CdfPlatformError):
    """A spec change silver cannot follow in place: a change of keys or history mode into a
    shape that cannot be rewritten from a snapshot in one commit, or one asked to apply forward
    only although it changes what a row is."""

    incident_code = "SPEC_CHANGE_REFUSED"
    default_action = (
        "move the silver table away (rename its folder, or drop the table) and run "
        "`cdf-platform rebuild <id>`, or restore the previous spec"
    )


class VerificationRefused(CdfPlatformError):
    """A verification that cannot compare silver with its spec: silver holds no watermark yet,
    its spec was edited since silver was written (or taken forward only), bronze was reset, or
    a repair would move the watermark backwards."""

    incident_code = "VERIFY_REFUSED"
    default_action = "run the pipeline (`cdf-platform run <id>`), then verify again"


class UnsafeSparkConfig(CdfPlatformError):
    """The Spark session is configured in a way that could drop changes silently, or sets a
    platform setting (`spark.cdf_platform.*`) to a value it cannot read."""

    incident_code = "UNSAFE_SPARK_CONFIG"
    default_action = "unset spark.sql.files.ignoreMissingFiles (it turns a lost window into loss)"


class UnknownReadFailure(CdfPlatformError):
    """A change-feed read, a silver write or any other step of a run failed for a reason the
    platform does not classify (the original error is chained as the cause)."""

    incident_code = "UNKNOWN_READ_FAILURE"
    default_action = "read the underlying error below; the watermark was not moved"


class TargetOwnershipConflict(CdfPlatformError):
    """The target location is not the pipeline's to write: silver of another pipeline, a Delta
    table the platform did not create, or files that are not a Delta table."""

    incident_code = "TARGET_OWNED_BY_OTHER_PIPELINE"
    default_action = "give each pipeline its own `target`"


def foreign_files_at_target(pipeline_id: str, target: str) -> TargetOwnershipConflict:
    """The conflict for a target location holding files that are not a Delta table."""
    return TargetOwnershipConflict(
        "the target location holds files that are not a Delta table",
        pipeline_id=pipeline_id,
        table=target,
        action="point `target` at a new or empty location, or move the files there away",
    )


class RebuildNeedsOverride(CdfPlatformError):
    """A rebuild of a FAIL_FAST pipeline was asked for without a person's override."""

    incident_code = "REBUILD_NEEDS_OVERRIDE"
    default_action = (
        "read the incident in the load log, then rerun the rebuild with "
        "`override_fail_fast: true` (the deployment must permit it: CDF_ALLOW_DESTRUCTIVE=1), "
        "or run `cdf-platform rebuild <id>` at a shell"
    )


class DestructiveActionNotPermitted(CdfPlatformError):
    """A run config asks for an action that destroys history or skips a guard (a maintenance
    run's `retain_zero` or `allow_window_loss`, a rebuild's `override_fail_fast`), and the
    deployment does not permit such actions: whoever can launch a run (anyone who reaches the
    UI) must not be able to destroy what every consumer still needs. Nothing was done."""

    incident_code = "DESTRUCTIVE_ACTION_NOT_PERMITTED"
    default_action = (
        "an operator permits it for the deployment by setting CDF_ALLOW_DESTRUCTIVE=1 in the "
        'environment of the code server and the run worker (docs/production.md, "Destructive '
        'actions"), reloads, runs it, and unsets it again; at a shell, the `cdf-platform` '
        "command needs no permission"
    )


class VacuumRefused(CdfPlatformError):
    """The consumer-aware VACUUM would cut a consumer's replay window, so it did not run."""

    incident_code = "VACUUM_REFUSED"
    default_action = (
        "catch the consumers up, raise `max_retention_hours`, or set `allow_window_loss: true` "
        "in the maintenance run's config to cut their windows knowingly"
    )


class MarksLost(CdfPlatformError):
    """A consumer asset's table exists but its log no longer shows the consumer's last
    watermarks (log cleanup removed the commits that recorded them)."""

    incident_code = "CONSUMER_WATERMARKS_LOST"
    default_action = (
        "nothing by hand: the consumer's next run reads every input in full (a full batch) and "
        "records new watermarks with its rows"
    )


class ConcurrentWriteConflict(CdfPlatformError):
    """Another run wrote silver while this run was writing it; Delta refused this commit."""

    incident_code = "CONCURRENT_WRITE"
    retryable = True
    default_action = (
        "nothing was written by this run and the watermark did not move; rerun it (it resumes "
        "from silver's watermark), and keep one run per pipeline (pool `cdf_pipeline_<id>` "
        "limited to 1)"
    )


class InvalidStorageConfig(CdfPlatformError):
    """The storage options (the pipelines file's `storage:` section, or the lake resource's
    `storage`) name an unknown option or scheme, an option the location's store does not take,
    or an environment variable that is not set; or two locations ask Spark's connector for
    different settings of one bucket or account."""

    incident_code = "INVALID_STORAGE_CONFIG"
    default_action = (
        "fix the named entry of `storage:` in the pipelines file (or of the lake resource's "
        "`storage`); docs/storage.md lists the options each store takes"
    )


class InvalidRunConfig(CdfPlatformError):
    """A run config names something the deployment does not have (a table no maintenance
    covers); nothing was done."""

    incident_code = "INVALID_RUN_CONFIG"
    default_action = "fix the named field of the run config"


class InvalidAlertConfig(CdfPlatformError):
    """The `alerts:` section (of the pipelines file or the Component) is malformed: an unknown
    key, a target with no kind or two, a route naming an unknown target, or an environment
    variable it reads that is not set."""

    incident_code = "INVALID_ALERT_CONFIG"
    default_action = "fix the named entry of `alerts:` (docs/production.md, Alerts, lists its keys)"


class StorageUnreachable(CdfPlatformError):
    """An object store refused or did not answer a read or write of a location with the
    lake's options (endpoint, region, credentials): from its storage configuration, or from
    the environment when no configured prefix matches the location."""

    incident_code = "STORAGE_UNREACHABLE"
    retryable = True
    default_action = (
        "check the endpoint, region and credentials the message names (the `storage:` entry "
        "of the location, or AWS_*/AZURE_*/GOOGLE_* in the environment), then rerun"
    )


class RuntimeEnvironmentError(CdfPlatformError):
    """The machine lacks something Spark needs (a Java 17+ runtime)."""

    incident_code = "RUNTIME_ENVIRONMENT"
    default_action = "install a Java 17+ runtime and put it on PATH or in JAVA_HOME"


class EngineUnavailable(RuntimeEnvironmentError):
    """The Spark Connect server a run uses (`CDF_SPARK_REMOTE`, the deployment's warm engine)
    did not answer, or went away while the run used it (killed, restarted): the run's session
    on it is gone. Nothing the run had not committed reached silver, and what it committed
    carries its watermark, so running it again applies every change exactly once."""

    incident_code = "ENGINE_UNAVAILABLE"
    retryable = True
    default_action = (
        "start the engine (`cdf-platform engine`, docs/production.md) or check "
        "$CDF_SPARK_REMOTE; the run is retried, and resumes from silver's watermark"
    )

    def at_engine(self, remote: str) -> EngineUnavailable:
        """This error, its problem naming the engine's address `remote` where it does not
        already (a run's Spark steps meet the loss without knowing where their session led);
        returns self."""
        if remote not in self.problem:
            self.problem = f"engine {remote}: {self.problem}"
            self.args = (self._render(),)
        return self


REBUILDABLE = (ReplayWindowLost, SourceReset, IncompatibleSchemaChange, CdfNotEnabled)
"""The failures a read from a pinned snapshot repairs (a silver rebuild, a consumer's full
recompute)."""
