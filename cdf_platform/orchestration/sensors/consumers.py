"""Consumer assets of the watermark IO manager get silver's guarantees: the `consumer_lag` and
`replay_window` checks, automatic repair and `recompute_job`.

A consumer is any asset written by the watermark IO manager that reads Delta tables through it
(docs/incremental-assets.md). Passed to the platform's definitions
(`build_defs(consumers=[...])`), each gets:

- `consumer_lag` and the blocking `replay_window` checks, computed together from the logs alone
  (`cdf_platform.planning.consumers.consumer_status`: the very plan its next read follows), with the
  figures silver's checks plot. A consumer with several inputs is judged by its worst input
  (the most behind for lag, the nearest to losing its window for the window), named in the
  description, and each input's lag and headroom are plotted too. They run after every
  materialization of the consumer and in `checks_job`.
- Repair: the rebuild sensor requests `recompute_job` for a consumer whose `replay_window`
  evaluation says LOST; that run hands the consumer a full batch of every input (the run tag
  `cdf_platform/full_recompute`), so it recomputes from the inputs' snapshots at pinned
  versions. A FAIL_FAST consumer is left for a person, who launches `recompute_job` for it.
- Automation: `consumer_sensor` requests `consumer_job` for a consumer when an input has new
  versions (`cdf_platform.orchestration.sensors.consumer_sensor`).
- Maintenance: the IO manager registers each consumer's inputs in the control tables, so the
  consumer-aware VACUUM of an input counts the consumer's watermark like a pipeline's, and a
  silver table read by consumers gets its own maintenance job.

A consumer's limits are its definition metadata `max_allowed_lag_hours` and
`min_headroom_hours` (default: a pipeline's defaults).
"""

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg

from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.orchestration.checks.silver_checks import (
    CONSUMER_LAG,
    REPLAY_WINDOW,
    CheckTarget,
    consumer_lag_result,
    replay_window_result,
)
from cdf_platform.orchestration.io_manager.watermark_io_manager import WatermarkIOManager, plain
from cdf_platform.orchestration.shared.figures import count, hours, text
from cdf_platform.orchestration.shared.keys import (
    FULL_RECOMPUTE_TAG,
    QUEUE_TAG,
    SILVER_QUEUE,
    WATERMARK_IO_MANAGER_KEY,
)
from cdf_platform.planning.consumers.consumer_status import ConsumerInput, input_status, read_marks
from cdf_platform.planning.status import PipelineStatus, WindowState

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

RECOMPUTE_JOB = "recompute_job"

_DEFAULT_LAG_HOURS = PipelineSpec.model_fields["max_allowed_lag_hours"].default
_DEFAULT_HEADROOM_HOURS = PipelineSpec.model_fields["min_headroom_hours"].default

# How bad a window state is, for judging a consumer by its worst input.
_SEVERITY = {
    WindowState.OK: 0,
    WindowState.NOT_STARTED: 1,
    WindowState.LOW_HEADROOM: 2,
    WindowState.SOURCE_MISSING: 3,
    WindowState.BLOCKED: 4,
    WindowState.LOST: 5,
}


@dataclass(frozen=True)
class ConsumerAsset:
    """A consumer asset as the platform sees it.

    Attributes:
        key: Its asset key.
        metadata: Its definition metadata (`path`, limits).
        inputs: Input id (the upstream asset key, as a string) -> upstream key.
        fallback_modes: Input id -> the input's declared `fallback_mode`, where it declares one.
        max_allowed_lag_hours: consumer_lag fails above this lag.
        min_headroom_hours: replay_window warns below this headroom.
    """

    key: dg.AssetKey
    metadata: Mapping[str, Any]
    inputs: Mapping[str, dg.AssetKey]
    fallback_modes: Mapping[str, str]
    max_allowed_lag_hours: float
    min_headroom_hours: float

    @property
    def id(self) -> str:
        """The consumer's id (its asset key as a string), as its watermarks name it."""
        return self.key.to_user_string()

    @property
    def target(self) -> CheckTarget:
        """What its checks are about."""
        source = ", ".join(self.inputs) if self.inputs else "its inputs"
        return CheckTarget(
            self.key, self.id, source, self.max_allowed_lag_hours, self.min_headroom_hours
        )

    @classmethod
    def of(cls, asset: dg.AssetsDefinition) -> "ConsumerAsset":
        """The consumer `asset` (one asset, written by the watermark IO manager).

        Raises:
            dagster.DagsterInvalidDefinitionError: `asset` is not such an asset.
        """
        if len(asset.keys) != 1:
            raise dg.DagsterInvalidDefinitionError(
                f"consumers are single assets; {sorted(k.to_user_string() for k in asset.keys)} "
                "come from one definition"
            )
        (key,) = asset.keys
        manager = asset.get_io_manager_key_for_asset_key(key)
        if manager != WATERMARK_IO_MANAGER_KEY:
            raise dg.DagsterInvalidDefinitionError(
                f"consumer {key.to_user_string()} is written by the IO manager {manager!r}, not "
                f"{WATERMARK_IO_MANAGER_KEY!r}: set io_manager_key={WATERMARK_IO_MANAGER_KEY!r}"
            )
        metadata = dict(asset.specs_by_key[key].metadata)
        inputs: dict[str, dg.AssetKey] = {}
        modes: dict[str, str] = {}
        for name, upstream in asset.keys_by_input_name.items():
            input_id = upstream.to_user_string()
            inputs[input_id] = upstream
            declared = plain(
                (asset.node_def.input_def_named(name).metadata or {}).get("fallback_mode")
            )
            if declared:
                modes[input_id] = str(declared)

        def figure(name: str, default: float) -> float:
            value = plain(metadata.get(name))
            return float(value) if isinstance(value, int | float) else float(default)

        return cls(
            key,
            metadata,
            inputs,
            modes,
            figure("max_allowed_lag_hours", _DEFAULT_LAG_HOURS),
            figure("min_headroom_hours", _DEFAULT_HEADROOM_HOURS),
        )

    def fallback_mode(self, default: FallbackMode) -> FallbackMode:
        """FAIL_FAST when it or any input declares it (a person decides its repair)."""
        modes = {default.value, *self.fallback_modes.values()}
        return (
            FallbackMode.FAIL_FAST
            if FallbackMode.FAIL_FAST.value in modes
            else FallbackMode.SNAPSHOT_REBUILD
        )

    def located_inputs(
        self, manager: WatermarkIOManager, upstream_metadata: Mapping[dg.AssetKey, Mapping]
    ) -> list[ConsumerInput]:
        """Its inputs with their tables, located as the IO manager locates them."""
        table = manager.table_location(self.key, self.metadata)
        return [
            ConsumerInput(
                self.id,
                table,
                input_id,
                manager.table_location(upstream, upstream_metadata.get(upstream, {})),
            )
            for input_id, upstream in self.inputs.items()
        ]

    def statuses(
        self, manager: WatermarkIOManager, upstream_metadata: Mapping[dg.AssetKey, Mapping]
    ) -> dict[str, PipelineStatus]:
        """Its status on each input (input id -> status), from the logs alone: what its checks
        report and its sensor acts on."""
        located = self.located_inputs(manager, upstream_metadata)
        storage = manager.lake.lake().storage
        marks = read_marks(self.id, located[0].consumer_table, storage) if located else (None, None)
        return {
            read.input_id: input_status(
                read,
                min_headroom_hours=self.min_headroom_hours,
                max_allowed_lag_hours=self.max_allowed_lag_hours,
                storage=storage,
                marks=marks,
            )
            for read in located
        }


def _worst(statuses: Mapping[str, PipelineStatus]) -> tuple[str, PipelineStatus]:
    """The input nearest to losing its window (then the least headroom)."""

    def badness(item: tuple[str, PipelineStatus]) -> tuple[int, float]:
        status = item[1]
        headroom = status.headroom_hours
        return _SEVERITY[status.state], -(headroom if headroom is not None else float("inf"))

    return max(statuses.items(), key=badness)


def _most_behind(statuses: Mapping[str, PipelineStatus]) -> tuple[str, PipelineStatus]:
    """The input with the most lag (a missing input first: its lag is unknown)."""

    def lag(item: tuple[str, PipelineStatus]) -> tuple[bool, float]:
        status = item[1]
        missing = status.state is WindowState.SOURCE_MISSING
        return missing, status.lag_hours or 0.0

    return max(statuses.items(), key=lag)


def _about(
    result: dg.AssetCheckResult,
    input_id: str,
    several: bool,
    metadata: Mapping[str, dg.MetadataValue],
) -> dg.AssetCheckResult:
    """`result` with `metadata` and, for a consumer with several inputs, the input it is about
    named first in its description."""
    description = f"{input_id}: {result.description}" if several else result.description
    return dg.AssetCheckResult(
        asset_key=result.asset_key,
        check_name=result.check_name,
        passed=result.passed,
        severity=result.severity,
        description=description,
        metadata={**result.metadata, **metadata},
    )


def consumer_check_results(
    consumer: ConsumerAsset,
    statuses: Mapping[str, PipelineStatus],
    fallback: FallbackMode,
    selected: set[str],
) -> Iterator[dg.AssetCheckResult]:
    """The results of the `selected` checks for a consumer's per-input `statuses`."""
    several = len(statuses) > 1
    target = consumer.target
    if CONSUMER_LAG in selected:
        input_id, status = _most_behind(statuses)
        metadata: dict[str, dg.MetadataValue] = {"input": text(input_id)}
        if several:
            for name, each in statuses.items():
                metadata[f"{name} version_lag"] = count(each.version_lag)
                metadata[f"{name} lag_hours"] = hours(each.lag_hours)
        yield _about(consumer_lag_result(target, status), input_id, several, metadata)
    if REPLAY_WINDOW in selected:
        input_id, status = _worst(statuses)
        # The rebuild sensor leaves a FAIL_FAST consumer's repair to a person.
        metadata = {"input": text(input_id), "fallback_mode": text(fallback.value)}
        if several:
            for name, each in statuses.items():
                if (headroom := each.headroom_hours) is not None:
                    metadata[f"{name} headroom_hours"] = hours(headroom)
        result = replay_window_result(target, status)
        yield _about(result, input_id, several, metadata)


def consumer_checks(
    consumer: ConsumerAsset, upstream_metadata: Mapping[dg.AssetKey, Mapping]
) -> dg.AssetChecksDefinition:
    """`consumer_lag` and the blocking `replay_window` on `consumer`, from one read of its
    watermarks and each input's log (`upstream_metadata`: definition metadata by asset key,
    where inputs' `path`s are)."""
    inputs = ", ".join(consumer.inputs)

    @dg.multi_asset_check(
        name=f"{consumer.key.to_python_identifier()}_checks",
        specs=[
            dg.AssetCheckSpec(
                CONSUMER_LAG,
                asset=consumer.key,
                description=(
                    f"How far this asset is behind {inputs}, counted from the first input "
                    f"version it has not applied: fails above {consumer.max_allowed_lag_hours:g} "
                    "hours (`max_allowed_lag_hours` metadata). Plots lag in versions and hours "
                    "and the watermark."
                ),
            ),
            dg.AssetCheckSpec(
                REPLAY_WINDOW,
                asset=consumer.key,
                blocking=True,
                description=(
                    f"Whether the versions of {inputs} this asset has not applied can still be "
                    f"read from the change feed: warns below {consumer.min_headroom_hours:g} "
                    "hours of headroom (`min_headroom_hours` metadata), errors once the window "
                    "is lost (the rebuild sensor then recomputes it). Plots headroom in hours, "
                    "the watermark and the earliest replayable version."
                ),
            ),
        ],
        can_subset=True,
    )
    def _checks(
        context: dg.AssetCheckExecutionContext,
        watermark_io_manager: dg.ResourceParam[WatermarkIOManager],
    ) -> Iterator[dg.AssetCheckResult]:
        statuses = consumer.statuses(watermark_io_manager, upstream_metadata)
        selected = {check.name for check in context.selected_asset_check_keys}
        fallback = consumer.fallback_mode(watermark_io_manager.fallback_mode)
        yield from consumer_check_results(consumer, statuses, fallback, selected)

    return _checks


def consumer_check_keys(consumers: Sequence[ConsumerAsset]) -> list[dg.AssetCheckKey]:
    """The two checks of every consumer."""
    return [
        dg.AssetCheckKey(consumer.key, check)
        for consumer in consumers
        for check in (CONSUMER_LAG, REPLAY_WINDOW)
    ]


def build_recompute_job(
    consumers: Sequence[ConsumerAsset],
) -> "UnresolvedAssetJobDefinition":
    """`recompute_job`: the selected consumers recompute from their inputs' snapshots."""
    return dg.define_asset_job(
        RECOMPUTE_JOB,
        selection=dg.AssetSelection.assets(*(consumer.key for consumer in consumers)),
        tags={FULL_RECOMPUTE_TAG: "true", QUEUE_TAG: SILVER_QUEUE},
        description="Recompute the selected consumer assets from their inputs' snapshots at "
        "pinned versions (every input is read in full), committing the new watermarks with "
        "the data: how a lost window is repaired (the rebuild sensor launches it; for a "
        "FAIL_FAST consumer a person does).",
    )
