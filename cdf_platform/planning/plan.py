"""Planning a pipeline run without a JVM: what mode, which pinned range, and what is wrong.

The plan is derived from the pipeline's assessment (`cdf_platform.planning.assessment`, the same
one `status` and the checks use) and decides: no-op, initial load, incremental, or a rebuild
that the pipeline's fallback policy must allow. Nothing is read through Spark and nothing is
written.

Example:
    >>> plan = plan_run(spec)  # doctest: +SKIP
    >>> plan.mode, plan.start_version, plan.end_version  # doctest: +SKIP
    (<RunMode.INCREMENTAL: 'incremental'>, 43, 57)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from cdf_platform.core.errors import CdfPlatformError, SourceReset, SpecChanged
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_fingerprint import SpecChange, fingerprint_of
from cdf_platform.planning.assessment import (
    PipelineAssessment,
    assess_pipeline,
    assess_with_control,
)
from cdf_platform.planning.spec_edits import forward_only_after
from cdf_platform.state.control import ControlTable
from cdf_platform.state.watermark import ForwardOnly, SilverState
from cdf_platform.window.replay_window import ConsumerAssessment, ReplayWindow

# A change set whose files take at most this much is small: its run is short enough for a
# fixed query plan (`cdf_platform.spark.runtime.small_steps`) and a lean driver JVM
# (`SparkSettings.short_run`).
SMALL_CHANGE_BYTES = 256 * 1024 * 1024
# An initial load's snapshot size is summed from at most this many commits (a checkpointed or
# long log without a checksum leaves it unknown: the load runs alone).
SNAPSHOT_REPLAY_COMMITS = 100


class RunMode(StrEnum):
    """What a pipeline run does."""

    NOOP = "noop"
    ADVANCE = "advance"
    """The pinned range holds only commits that change no row (OPTIMIZE, VACUUM START/END,
    property changes): the watermark advances to its end in a silver commit written without
    Spark (`cdf_platform.state.watermark.advance_watermark`)."""
    INCREMENTAL = "incremental"
    INITIAL_LOAD = "initial_load"
    REBUILD = "rebuild"
    SNAPSHOT = "snapshot"
    """A snapshot source's run (`changes: snapshots`): silver reconciled with bronze's snapshot
    at the pinned version."""
    VERIFY_REPAIR = "verify_repair"
    """A verification's repair (`cdf-platform verify --repair`, the verify job): silver
    reconciled with bronze's snapshot at the version it was compared with, never planned."""

    @property
    def reads_snapshot(self) -> bool:
        """Whether the run reads bronze's snapshot at its pinned version (an initial load, a
        rebuild, a snapshot source's run, a verification's repair), not a change-feed range."""
        return self in (
            RunMode.INITIAL_LOAD,
            RunMode.REBUILD,
            RunMode.SNAPSHOT,
            RunMode.VERIFY_REPAIR,
        )


@dataclass(frozen=True)
class RunPlan:
    """The decision for one run, made from the logs alone.

    Attributes:
        mode: what the run does (REBUILD only when `problem` is set or one is asked for).
        start_version / end_version: the pinned bronze range (incremental) or snapshot version.
        problem: the classified reason the incremental path cannot run, if any.
        spec_record: the current spec's row-shaping fields, which the run's commit records.
        spec_change: how the spec differs from the one silver records (a rebuild reconciles
            or reshapes it; an incremental run takes it forward only), if it does.
        forward_only: the edits silver took forward only since its last rebuild.
    """

    spec: PipelineSpec
    mode: RunMode
    silver: SilverState
    window: ReplayWindow
    assessment: ConsumerAssessment
    start_version: int | None
    end_version: int
    problem: CdfPlatformError | None = None
    spec_record: dict[str, str] | None = None
    spec_change: SpecChange | None = None
    forward_only: ForwardOnly | None = None

    @property
    def watermark(self) -> int | None:
        """The watermark before the run."""
        return self.silver.watermark

    def describe(self) -> str:
        """One line for a run's log: the pinned change set the run applies."""
        problem = f"; problem: {self.problem.incident_code}" if self.problem else ""
        if self.mode is RunMode.INCREMENTAL:
            what = f"bronze versions ({self.watermark}, {self.end_version}]"
        elif self.mode is RunMode.ADVANCE:
            what = (
                f"bronze versions ({self.watermark}, {self.end_version}] change no row: the "
                "watermark advances without Spark"
            )
        elif self.mode is RunMode.NOOP:
            what = f"nothing after watermark {self.watermark}"
        else:
            what = f"bronze snapshot at version {self.end_version}"
        return f"{self.spec.id}: {self.mode.value}, {what}{problem}"

    @property
    def spec_fingerprint(self) -> str | None:
        """The fingerprint of the spec this run writes under."""
        return fingerprint_of(self.spec_record) if self.spec_record is not None else None

    def forward_only_after(self) -> ForwardOnly | None:
        """The forward-only record an incremental commit of this plan carries: the one silver
        holds, widened by a spec edit this run takes forward only."""
        return forward_only_after(self.watermark, self.spec_change, self.forward_only)

    @property
    def spec_edits(self) -> tuple[str, ...]:
        """Every row-shaping field silver does not hold as the spec says: the edit since its
        last write, then those it took forward only (what a rebuild of this plan brings in)."""
        changed = self.spec_change.fields if self.spec_change is not None else ()
        held = self.forward_only.fields if self.forward_only is not None else ()
        return tuple(dict.fromkeys((*changed, *held)))

    def change_bytes(self) -> int | None:
        """Bytes of the files a change-data-feed read of the pinned range scans (each commit's
        change files, or its data files when it has none), summed from the log; None without
        a range, or when the log leaves a size out."""
        if self.start_version is None:
            return None
        log = self.window.log
        total = 0
        for version in range(self.start_version, self.end_version + 1):
            if not log.has_commit(version):
                return None
            for action in log.commit(version).files_read_by_cdf():
                if action.size is None:
                    return None
                total += action.size
        return total

    def snapshot_bytes(self) -> int | None:
        """Bytes of the data files of bronze's snapshot at the pinned version (what an initial
        load reads): the checksum's `tableSizeBytes` when Delta wrote one, else summed over the
        commits from version 0 while they are all in the log and few (at most
        SNAPSHOT_REPLAY_COMMITS); None when neither tells."""
        log, version = self.window.log, self.end_version
        checksum = log.checksum(version)
        size = checksum.get("tableSizeBytes") if checksum else None
        if isinstance(size, int):
            return size
        if version >= SNAPSHOT_REPLAY_COMMITS or log.first_missing_commit(0, version) is not None:
            return None
        live: dict[str, int | None] = {}
        for commit in (log.commit(v) for v in range(version + 1)):
            for removed in commit.removes:
                live.pop(removed.path, None)
            for added in commit.adds:
                live[added.path] = added.size
        sizes = list(live.values())
        return None if None in sizes else sum(size or 0 for size in sizes)

    def shares_a_run(self) -> bool:
        """Whether this run may share a run (one process, one Spark driver) with other
        pipelines' runs: a small incremental run (`is_small_incremental`), or an initial load or
        a snapshot source's run (no problem to fall back on) of a snapshot of at most
        SMALL_CHANGE_BYTES of files, or a watermark advance (no Spark at all)."""
        if self.mode is RunMode.ADVANCE or self.is_small_incremental():
            return True
        # A rebuild is planned for a problem only, so this leaves initial loads and snapshot runs.
        if not self.mode.reads_snapshot or self.problem is not None:
            return False
        size = self.snapshot_bytes()
        return size is not None and size <= SMALL_CHANGE_BYTES

    def is_small_incremental(self) -> bool:
        """Whether this is an incremental run (no problem to fall back on) over a change set
        of at most SMALL_CHANGE_BYTES of files."""
        if self.mode is not RunMode.INCREMENTAL or self.problem is not None:
            return False
        size = self.change_bytes()
        return size is not None and size <= SMALL_CHANGE_BYTES


def plan_from(found: PipelineAssessment) -> RunPlan:
    """The run plan an assessment leads to (see `plan_run`).

    Raises:
        CdfPlatformError: the assessment's blocking problem (`SourceNotFound`,
            `TargetOwnershipConflict`, `InvalidPipelineSpec`, `CdfNotEnabled` before the first
            load): a person must fix the input.
    """
    if found.problem is not None and found.blocking:
        raise found.problem
    window, consumer = found.window, found.consumer
    assert window is not None and consumer is not None  # only a blocking problem leaves them out
    latest = window.latest_version

    def make(mode: RunMode, start: int | None) -> RunPlan:
        return RunPlan(
            found.spec,
            mode,
            found.silver,
            window,
            consumer,
            start,
            latest,
            found.problem,
            found.spec_record,
            found.spec_change,
            found.forward_only,
        )

    watermark = found.silver.watermark
    if watermark is None:
        return make(RunMode.INITIAL_LOAD, None)
    if found.problem is not None:
        snapshot_only = isinstance(found.problem, SourceReset | SpecChanged)
        return make(RunMode.REBUILD, None if snapshot_only else watermark + 1)
    if watermark >= latest:
        return make(RunMode.NOOP, None)
    if window.log.changes_no_rows(watermark + 1, latest):
        # Whatever the source kind: no change to apply, and the snapshot is the one silver holds.
        return make(RunMode.ADVANCE, watermark + 1)
    if not found.spec.changes.replays_history:
        return make(RunMode.SNAPSHOT, None)
    return make(RunMode.INCREMENTAL, watermark + 1)


def plan_run(
    spec: PipelineSpec,
    *,
    now: datetime | None = None,
    known_source_id: str | None = None,
) -> RunPlan:
    """Decide what a run of `spec` must do, from the bronze and silver logs alone.

    Args:
        spec: the pipeline (locations resolved).
        now: the clock for lag and headroom (default: current UTC time).
        known_source_id: the bronze table id recorded in the control table, used when silver's
            recent log no longer holds it.

    Raises:
        SourceNotFound: bronze is missing or not a Delta table.
        TargetOwnershipConflict: silver belongs to another pipeline, or its location holds
            files that are not a Delta table.
        InvalidPipelineSpec: a bronze column is named like one the platform adds.
        CdfNotEnabled: the change feed is off on bronze before the first load.
    """
    return plan_from(assess_pipeline(spec, known_source_id=known_source_id, now=now))


def plan_pipeline(
    spec: PipelineSpec, control: ControlTable, *, now: datetime | None = None
) -> RunPlan:
    """The JVM-free plan of `spec`'s next run (the control table supplies the recorded source
    table id when silver's recent log no longer holds it)."""
    return plan_from(assess_with_control(spec, control, now=now))
