"""The watermark as silver's own Delta log holds it, read without a JVM (and advanced without
one over a range that changes no row, `advance_watermark`).

Every platform write to silver carries a Delta idempotent-write transaction
(`txnAppId`, `txnVersion` = the bronze version it applies through) and commit `userMetadata`
describing the run, in the same commit as the data. The silver log is therefore the source of
truth for the watermark; the control table mirrors it.

Delta skips a write whose `txnVersion` is not above the stored one, so the watermark can only
move backwards (a rebuild after a source reset) under a new app id: `<pipeline_id>` for
generation 0, `<pipeline_id>~<n>` after the n-th source reset.

Example:
    >>> state = read_silver_state("/lake/silver/orders", "orders")  # doctest: +SKIP
    >>> state.watermark, state.app_id  # doctest: +SKIP
    (57, 'orders')
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cdf_platform.core.errors import SourceNotFound
from cdf_platform.core.spec.spec_fingerprint import fingerprint_of
from cdf_platform.core.storage import ENVIRONMENT_ONLY, StorageConfig
from cdf_platform.deltalog.actions import TableMetadata
from cdf_platform.deltalog.delta_tables import open_delta_table, store_errors_classified
from cdf_platform.deltalog.log import DeltaLog

OWNER_PROPERTY = "cdf_platform.pipeline_id"
USER_METADATA_KEY = "cdf_platform"
# How many recent silver commits to scan for the last platform commit's metadata.
HISTORY_SCAN = 100
# How many of silver's newest commits the fast path reads for the last platform commit; past
# them (a run of maintenance commits, a foreign writer) the whole table state is read.
NEWEST_SCAN = 4


def app_id(pipeline_id: str, generation: int) -> str:
    """The Delta txn app id of `pipeline_id` at `generation`."""
    return pipeline_id if generation == 0 else f"{pipeline_id}~{generation}"


@dataclass(frozen=True)
class ForwardOnly:
    """Spec edits silver took forward only (`on_spec_change: forward_only`): rows applied up to
    bronze version `since` were written under the spec `from_fingerprint`, later changes under
    the current one. Cleared by the next rebuild.

    Attributes:
        since: The watermark when the first such edit was taken.
        fields: Every row-shaping field edited since then.
        from_fingerprint: The fingerprint of the spec the older rows were written under.
    """

    since: int | None
    fields: tuple[str, ...]
    from_fingerprint: str

    def as_metadata(self) -> dict[str, Any]:
        """The JSON silver's commits carry."""
        return {"since": self.since, "fields": list(self.fields), "from": self.from_fingerprint}

    @classmethod
    def parse(cls, value: object) -> ForwardOnly | None:
        """The record a commit's metadata holds, or None."""
        if not isinstance(value, dict):
            return None
        since = value.get("since")
        return cls(
            int(since) if since is not None else None,
            tuple(str(f) for f in value.get("fields") or ()),
            str(value.get("from")),
        )


@dataclass(frozen=True)
class SilverState:
    """What silver's log says about one pipeline.

    Attributes:
        exists: silver is a Delta table.
        watermark: last bronze version applied (None: nothing applied yet).
        generation: source generation (incremented by each rebuild after a source reset).
        owner: the pipeline id recorded in silver's table properties.
        last_run: `userMetadata` of the latest platform commit for this pipeline, if still in
            the log (pipeline_id, mode, start/end version, source_table_id, generation, run_id).
        silver_version: silver's latest version.
    """

    exists: bool
    watermark: int | None
    generation: int
    owner: str | None
    last_run: dict[str, Any] | None
    silver_version: int | None

    @property
    def app_id(self) -> str | None:
        """The txn app id of the current generation (None when silver has none)."""
        if self.owner is None:
            return None
        return app_id(self.owner, self.generation)

    @property
    def spec_record(self) -> dict[str, str] | None:
        """The row-shaping fields' hashes of the spec silver was last written under
        (`cdf_platform.core.spec.spec_fingerprint.spec_record`), when its log holds them."""
        return parse_spec_record(self.last_run.get("spec") if self.last_run is not None else None)

    @property
    def forward_only(self) -> ForwardOnly | None:
        """The spec edits applied to new changes only since the last rebuild, if any."""
        value = self.last_run.get("forward_only") if self.last_run is not None else None
        return ForwardOnly.parse(value)

    @property
    def source_table_id(self) -> str | None:
        """Bronze table id the watermark refers to, when known from silver's log."""
        if self.last_run is None:
            return None
        value = self.last_run.get("source_table_id")
        return str(value) if value is not None else None


def parse_user_metadata(raw: object, pipeline_id: str) -> dict[str, Any] | None:
    """The platform's run description from a commit's `userMetadata`, if it is ours."""
    if not isinstance(raw, str):
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    ours = document.get(USER_METADATA_KEY)
    if isinstance(ours, dict) and ours.get("pipeline_id") == pipeline_id:
        return ours
    return None


def read_silver_state(
    target: str, pipeline_id: str, *, storage: StorageConfig = ENVIRONMENT_ONLY
) -> SilverState:
    """Read the watermark of `pipeline_id` from silver's log (JVM-free), with the options
    `storage` (the lake's) gives `target`.

    The newest commits usually answer it (the log listing, silver's checksum and a commit or
    two: what a sensor can afford per pipeline on every tick); otherwise `deltalake` reads the
    table's whole state (checkpoint and all)."""
    try:
        log = DeltaLog(target, storage)
    except SourceNotFound:
        return SilverState(False, None, 0, None, None, None)
    return _from_newest_commits(log, pipeline_id) or _from_table_state(target, pipeline_id, storage)


def _generation_of(transaction_app_id: str, pipeline_id: str) -> int | None:
    """The generation a txn app id names for `pipeline_id`, or None when it is not its."""
    if transaction_app_id == pipeline_id:
        return 0
    prefix = f"{pipeline_id}~"
    if transaction_app_id.startswith(prefix) and transaction_app_id[len(prefix) :].isdigit():
        return int(transaction_app_id[len(prefix) :])
    return None


def _from_newest_commits(log: DeltaLog, pipeline_id: str) -> SilverState | None:
    """`pipeline_id`'s state from the newest platform commit among silver's NEWEST_SCAN newest,
    or None when none of them is one.

    Every platform write stamps its txn and its run description in one commit, and a newer
    generation's app id is only ever written after the older one's: the newest commit holding
    any of the pipeline's txn actions holds the current generation, its watermark and the
    last run, which is what the whole table state would say.
    """
    latest = log.latest_version()
    versions = log.commit_versions()
    for version in reversed(versions[-NEWEST_SCAN:]):
        if version + 1 <= latest and not log.has_commit(version + 1):
            return None  # a gap: commits the scan has not seen may hold a newer stamp
        commit = log.commit(version, read_ahead=False)
        ours = {
            generation: watermark
            for app, watermark in commit.transactions.items()
            if (generation := _generation_of(app, pipeline_id)) is not None
        }
        if not ours:
            continue
        last_run = parse_user_metadata(commit.user_metadata, pipeline_id)
        if last_run is None:
            return None  # not a platform commit as the platform writes them
        generation = max(ours)
        checksum = log.checksum(latest) or {}
        metadata = checksum.get("metadata")
        configuration = (
            TableMetadata.from_action(metadata).configuration
            if isinstance(metadata, dict)
            else log.latest_metadata().configuration
        )
        return SilverState(
            exists=True,
            watermark=int(ours[generation]),
            generation=generation,
            owner=configuration.get(OWNER_PROPERTY),
            last_run=last_run,
            silver_version=latest,
        )
    return None


def _from_table_state(target: str, pipeline_id: str, storage: StorageConfig) -> SilverState:
    """`pipeline_id`'s state from silver's whole table state, read by `deltalake` (`target` is
    a Delta table: `read_silver_state` has listed its log already)."""
    table = open_delta_table(target, storage)
    owner = table.metadata().configuration.get(OWNER_PROPERTY)
    generation = 0
    watermark = table.transaction_version(app_id(pipeline_id, 0))
    # Generations are consecutive: probe until the first one that was never written.
    while True:
        newer = table.transaction_version(app_id(pipeline_id, generation + 1))
        if newer is None:
            break
        generation += 1
        watermark = newer
    last_run = None
    for entry in table.history(HISTORY_SCAN):
        last_run = parse_user_metadata(entry.get("userMetadata"), pipeline_id)
        if last_run is not None:
            break
    return SilverState(
        exists=True,
        watermark=None if watermark is None else int(watermark),
        generation=generation,
        owner=owner,
        last_run=last_run,
        silver_version=int(table.version()),
    )


def advance_watermark(
    target: str, app: str, version: int, metadata: str, *, storage: StorageConfig
) -> bool | None:
    """Commit the watermark `version` of txn app id `app` to silver `target` with no data, by
    `deltalake` (no JVM, with the options `storage` gives `target`): a commit of a `txn`
    action and `metadata` as its `userMetadata`, what
    a Spark write of no rows would commit. For a range of bronze commits that change no row.

    The txn is checked against the snapshot the commit is made on, and a concurrent commit is
    caught by `deltalake`'s conflict check: the watermark never moves backwards.

    Returns:
        True when committed; False when silver already holds `version` or a later one for
        `app` (a newer run applied it first: nothing is written); None when silver's protocol
        needs a table feature `deltalake` cannot write (in-commit timestamps, row tracking,
        type widening, ...): nothing is written and Spark must make the commit.

    Raises:
        StorageUnreachable: silver's store refused or did not answer.
    """
    from deltalake import CommitProperties, PostCommitHookProperties, Transaction
    from deltalake.exceptions import CommitFailedError

    table = open_delta_table(target, storage)
    held = table.transaction_version(app)
    if held is not None and held >= version:
        return False
    try:
        with store_errors_classified(target, storage):
            table.create_write_transaction(
                [],
                mode="append",
                schema=table.schema(),
                commit_properties=CommitProperties(
                    custom_metadata={"userMetadata": metadata},
                    app_transactions=[Transaction(app, version)],
                ),
                # Checkpoints and log cleanup stay Spark's (its writes and its maintenance).
                post_commithook_properties=PostCommitHookProperties(
                    create_checkpoint=False, cleanup_expired_logs=False
                ),
            )
    except CommitFailedError as err:
        # deltalake 1.6 refuses, before writing, a table whose protocol names a writer feature
        # it does not implement: "Unsupported table features required: [...]".
        if "Unsupported table features" in str(err):
            return None
        raise
    return True


def user_metadata(**fields: Any) -> str:
    """The `userMetadata` JSON the platform writes on its silver commits."""
    return json.dumps({USER_METADATA_KEY: fields}, sort_keys=True, default=str)


def parse_spec_record(value: object) -> dict[str, str] | None:
    """A spec record (field -> hash) as silver's metadata or the control table's mirror holds
    it, or None when `value` is none."""
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else None


def spec_metadata(
    record: dict[str, str] | None, forward_only: ForwardOnly | None = None
) -> dict[str, Any]:
    """The `user_metadata` fields recording the spec a silver commit was written under (and the
    edits taken forward only since the last rebuild): what `SilverState.spec_record` and
    `SilverState.forward_only` read back."""
    if record is None:
        return {}
    fields: dict[str, Any] = {"spec": record, "spec_fingerprint": fingerprint_of(record)}
    if forward_only is not None:
        fields["forward_only"] = forward_only.as_metadata()
    return fields
