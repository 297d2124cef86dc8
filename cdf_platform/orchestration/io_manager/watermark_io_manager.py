"""`WatermarkIOManager`: any Dagster asset consumes Delta tables' changes exactly once.

For an asset input that is a Delta table (a bronze external asset, a silver asset, or a table
this IO manager wrote), `load_input` hands the *consuming* asset a `ChangeBatch`: the changes of
that input since the consumer's own watermark for it, over a range pinned and checked against
the input's replay window before anything is read
(`cdf_platform.planning.consumers.input_plan`), or the snapshot for a full run (first run, lost
window, recreated input), or nothing new (no Spark start). The asset returns what to write:
`MergeRows` (on declared keys; a matched row can take an expression, to apply a delta),
`ReplaceRows` (a full recompute), or None (nothing to write: no commit, and the watermarks
stay). `handle_output` writes the consumer's Delta table and records every input's pinned
version in the same commit (`cdf_platform.state.consumer_marks`), so a crash leaves the old data
with the old watermarks or the new with the new, and two consumers of one table keep independent
watermarks.

Where tables live: an asset's `path` definition metadata, else `<lake_root>/<asset key path>`.
An input's keys: the input's `keys` metadata (`AssetIn(metadata={"keys": [...]})`), else the
upstream asset's. A lost window or a recreated input gives a full batch, or with
`fallback_mode: FAIL_FAST` (the IO manager's, or the input's `fallback_mode` metadata) fails the
run with the classified error.

Example:
    >>> @dg.asset(io_manager_key="watermark_io_manager",
    ...           ins={"orders": dg.AssetIn(key="silver/orders")})  # doctest: +SKIP
    ... def revenue(orders: ChangeBatch) -> TableWrite | None:
    ...     if orders.nothing_new:
    ...         return None
    ...     ...
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
from pydantic import Field, PrivateAttr

from cdf_platform.core.errors import CdfPlatformError, InvalidPipelineSpec
from cdf_platform.core.spec.modes import FallbackMode
from cdf_platform.orchestration.io_manager.silver_io import (
    PipelineBatch,
    PipelineWrite,
    load_pipeline_batch,
    orchestrator_times,
    pipeline_spec_of,
    write_pipeline,
)
from cdf_platform.orchestration.shared.keys import FULL_RECOMPUTE_TAG, WATERMARK_IO_MANAGER_KEY
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.orchestration.shared.step_failures import mark_retryable_run, platform_failure
from cdf_platform.planning.consumers.input_plan import BatchMode, plan_input
from cdf_platform.run import OrchestratorTimes
from cdf_platform.spark.read.batch import ChangeBatch, MergeRows, TableWrite
from cdf_platform.spark.write.consumer_write import consumer_stamp, describe, write_output
from cdf_platform.state.consumer_marks import ConsumerMarks, MarksLost, read_consumer_marks

logger = logging.getLogger(__name__)

RESOURCE_KEY = WATERMARK_IO_MANAGER_KEY


@dataclass
class _Step:
    """One consumer's step in one run: its watermarks as read, and the batches handed out."""

    marks: ConsumerMarks | None
    marks_lost: str | None
    code_version: str | None = None
    batches: dict[str, ChangeBatch] = field(default_factory=dict)


def plain(value: object) -> object:
    """A metadata entry's value (Dagster may wrap it in a MetadataValue)."""
    return getattr(value, "value", value)


def _keys(value: object) -> tuple[str, ...]:
    value = plain(value)
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(k.strip() for k in value.split(",") if k.strip())
    if isinstance(value, list | tuple):
        return tuple(str(k) for k in value)
    return ()


class WatermarkIOManager(dg.ConfigurableIOManager):
    """Storage I/O with a watermark: each consuming asset gets its inputs' changes since its
    own last write, window-checked, and its output is committed with those watermarks.

    Example:
        >>> defs = dg.Definitions(assets=[revenue], resources={
        ...     "watermark_io_manager": WatermarkIOManager(spark=spark, lake=lake)})
        ... # doctest: +SKIP
    """

    spark: SparkResource
    lake: LakeLayout
    fallback_mode: FallbackMode = Field(
        default=FallbackMode.SNAPSHOT_REBUILD,
        description="What a lost replay window, a recreated input or lost watermarks do: "
        "SNAPSHOT_REBUILD hands the consumer a full batch (the input's snapshot), FAIL_FAST "
        "fails the run with the classified error. An input's `fallback_mode` metadata "
        "overrides it.",
    )

    # Each consumer's step in progress, by run id and consumer: what `load_input` read and
    # handed out, waiting for the step's `handle_output`. Dagster builds this IO manager for each
    # run (for each step with a multiprocess executor) and gives both sides of a step the same
    # object; a run's steps in one process each have their own entry.
    _pending: dict[tuple[str, str], _Step] = PrivateAttr(default_factory=dict)
    _pending_lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)
    # The run's Dagster times (`orchestrator_times`) with its id: read at its first silver step,
    # kept for its later ones (a shared run writes many silver tables).
    _run_times: tuple[str, OrchestratorTimes] | None = PrivateAttr(default=None)

    # -- where tables are ---------------------------------------------------------------------

    def table_location(self, key: dg.AssetKey, metadata: Mapping[str, Any] | None) -> str:
        """The Delta table of asset `key`: its `path` metadata, else under the lake root."""
        path = plain((metadata or {}).get("path"))
        if isinstance(path, str) and path:
            return path
        if plain((metadata or {}).get("table_name")):
            raise InvalidPipelineSpec(
                f"asset {key.to_user_string()} names a catalog table; the watermark IO manager "
                "reads tables by path",
                action="give the asset a `path` metadata entry (its table's location)",
            )
        return f"{self.lake.lake_root.rstrip('/')}/{'/'.join(key.path)}"

    # -- input side ---------------------------------------------------------------------------

    def load_input(self, context: dg.InputContext) -> ChangeBatch | PipelineBatch:
        # A pipeline's silver loads its run plan; its watermark is silver's own (silver_io).
        pipeline = pipeline_spec_of(context)
        if pipeline is not None:
            return load_pipeline_batch(context, pipeline, self.spark, self.lake)
        consumer_key = _consumer_key(context)
        consumer = consumer_key.to_user_string()
        upstream = context.upstream_output
        upstream_metadata = upstream.definition_metadata if upstream is not None else {}
        input_id = context.asset_key.to_user_string()
        table = self.table_location(context.asset_key, upstream_metadata)
        own = context.definition_metadata or {}
        keys = _keys(own.get("keys")) or _keys(upstream_metadata.get("keys"))
        declared = str(plain(own.get("fallback_mode")) or self.fallback_mode)
        if declared not in {mode.value for mode in FallbackMode}:
            problem = InvalidPipelineSpec(
                f"input {input_id} of {consumer} declares fallback_mode {declared!r}",
                pipeline_id=consumer,
                table=input_id,
                action=f"set fallback_mode to one of {[mode.value for mode in FallbackMode]}",
            )
            raise platform_failure(problem) from problem
        fallback = FallbackMode(declared)
        consumer_node = context.step_context.job_def.asset_layer.get(consumer_key)
        step = self._step(
            context.step_context.run_id,
            consumer,
            self.table_location(consumer_key, consumer_node.metadata),
            consumer_node.code_version,
        )
        full_requested = (
            f"a full recompute was requested (run tag {FULL_RECOMPUTE_TAG})"
            if context.step_context.dagster_run.tags.get(FULL_RECOMPUTE_TAG) == "true"
            # Rows computed by the consumer's older code are recomputed, not merged into.
            else step.marks.code_changed(step.code_version)
            if step.marks is not None
            else None
        )
        storage = self.lake.lake().storage
        try:
            plan = plan_input(
                consumer,
                input_id,
                table,
                step.marks,
                fallback,
                marks_lost=step.marks_lost,
                full_requested=full_requested,
                storage=storage,
            )
        except CdfPlatformError as err:
            raise platform_failure(err) from err
        if plan.mode is not BatchMode.NOTHING_NEW:
            # Rows are coming: the asset may build Spark expressions before it reads them.
            self.spark.session_on(storage)
        batch = ChangeBatch(plan, keys, session=lambda: self.spark.session_on(storage))
        step.batches[input_id] = batch
        context.log.info(
            "%s reads %s: %s, versions %s..%s (watermark %s)%s",
            consumer,
            input_id,
            plan.mode.value,
            plan.start_version,
            plan.end_version,
            plan.watermark,
            f"; {plan.reason}" if plan.reason else "",
        )
        return batch

    def _step(self, run_id: str, consumer: str, table: str, code_version: str | None) -> _Step:
        """The consumer's step in this run: its watermarks, read at its first input."""
        with self._pending_lock:
            found = self._pending.get((run_id, consumer))
        if found is not None:
            return found
        try:
            marks = read_consumer_marks(table, consumer, storage=self.lake.lake().storage)
            step = _Step(marks, None, code_version)
        except MarksLost as err:
            step = _Step(None, err.problem, code_version)
        with self._pending_lock:
            return self._pending.setdefault((run_id, consumer), step)

    # -- output side --------------------------------------------------------------------------

    def handle_output(self, context: dg.OutputContext, obj: object) -> None:
        if isinstance(obj, PipelineWrite):
            write_pipeline(context, obj, self.spark, self.lake, self._orchestrator_times(context))
            return
        key = context.asset_key
        consumer = key.to_user_string()
        with self._pending_lock:
            step = self._pending.pop((context.run_id, consumer), None)
        batches = list(step.batches.values()) if step is not None else []
        try:
            self._write(context, consumer, obj, step, batches)
        finally:
            for batch in batches:
                batch.release()

    def _orchestrator_times(self, context: dg.OutputContext) -> OrchestratorTimes:
        """When Dagster created, dequeued and launched this run: read at its first silver step,
        the same for its later ones."""
        if self._run_times is None or self._run_times[0] != context.run_id:
            instance = context.step_context.instance
            self._run_times = (context.run_id, orchestrator_times(instance, context.run_id))
        return self._run_times[1]

    def _write(
        self,
        context: dg.OutputContext,
        consumer: str,
        obj: object,
        step: _Step | None,
        batches: list[ChangeBatch],
    ) -> None:
        if obj is None:
            context.log.info("%s: nothing to write; its watermarks stay", consumer)
            context.add_output_metadata({"written": False})
            return
        if not isinstance(obj, TableWrite):
            raise platform_failure(
                InvalidPipelineSpec(
                    f"{consumer} returned {type(obj).__name__}; the watermark IO manager "
                    "writes MergeRows, ReplaceRows or None",
                    pipeline_id=consumer,
                    action="return MergeRows, ReplaceRows or None from the asset",
                )
            )
        if isinstance(obj, MergeRows) and any(b.full for b in batches):
            full = [b.plan.input_id for b in batches if b.full]
            raise platform_failure(
                InvalidPipelineSpec(
                    f"{consumer} merged rows while {full} handed it a full batch: a full batch "
                    "replaces the consumer's table (its changes since the watermark are unknown)",
                    pipeline_id=consumer,
                    action="when `batch.full`, return ReplaceRows of a recompute from "
                    "`batch.snapshot()`",
                )
            )
        table = self.table_location(context.asset_key, context.definition_metadata)
        counter = (step.marks.counter if step and step.marks else 0) + 1
        code_version = step.code_version if step is not None else None
        stamp = consumer_stamp(consumer, counter, batches, code_version) if batches else None
        if batches and (step is None or step.marks is None or any(b.full for b in batches)):
            # Before the data: a registered consumer without watermarks needs nothing kept,
            # while one unregistered but written would be invisible to the VACUUM guard.
            self._register(consumer, table, batches)
        try:
            storage = self.lake.lake().storage
            spark = self.spark.session_on(storage)
            write_output(spark, table, obj, stamp, consumer, storage=storage)
        except CdfPlatformError as err:
            mark_retryable_run(context, err, self.spark)
            raise platform_failure(err) from err
        metadata: dict[str, Any] = {
            "written": True,
            "write": describe(obj),
            "path": dg.MetadataValue.path(table),
        }
        if code_version is not None:
            metadata["code_version"] = code_version
        for batch in batches:
            name = batch.plan.input_id
            metadata[f"{name} mode"] = batch.mode.value
            metadata[f"{name} watermark"] = batch.end_version
            if batch.plan.reason is not None:
                metadata[f"{name} reason"] = batch.plan.reason
        context.add_output_metadata(metadata)
        context.log.info("%s: %s into %s (run %d)", consumer, describe(obj), table, counter)

    def _register(self, consumer: str, table: str, batches: list[ChangeBatch]) -> None:
        """Record in the control tables which tables `consumer` reads (on its first write, and
        on every full one: an input may have moved), for the consumer-aware VACUUM."""
        control = self.lake.control()
        for batch in batches:
            control.record_consumer(consumer, table, batch.plan.input_id, batch.plan.table)


def _consumer_key(context: dg.InputContext) -> dg.AssetKey:
    """The asset whose input `context` loads (one asset per step)."""
    keys = context.step_context.get_output_asset_keys()
    if len(keys) != 1:
        raise platform_failure(
            InvalidPipelineSpec(
                "the watermark IO manager loads inputs of single assets; this step writes "
                f"{sorted(k.to_user_string() for k in keys)}",
                action="give each asset that reads through the watermark IO manager a step of "
                "its own (no multi-asset)",
            )
        )
    return next(iter(keys))
