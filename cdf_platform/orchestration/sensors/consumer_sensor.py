"""`consumer_sensor`: run a consumer asset of the watermark IO manager as soon as one of its
inputs has new versions, as the incremental sensor runs silver.

Each tick reads every consumer's watermarks and its inputs' logs (no Spark; the consumer assets
and their status are `cdf_platform.orchestration.sensors.consumers`) and requests
`consumer_job` for a consumer that is behind on an input it can read incrementally (or has
never read), and only for a consumer with no run pending (queued or in progress): that run reads
every version up to the latest at its start. The run key
(`consume:<consumer>:<input>@<version>,...`) names the inputs' latest versions, so one input
version never gets two runs. A consumer whose window is lost is the rebuild sensor's
(`recompute_job`); one whose input is missing or blocked waits for its fix, named in the skip
reason.
"""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import dagster as dg

from cdf_platform.orchestration.io_manager.watermark_io_manager import WatermarkIOManager
from cdf_platform.orchestration.sensors.consumers import ConsumerAsset
from cdf_platform.orchestration.sensors.incremental_sensor import PENDING_STATUSES
from cdf_platform.orchestration.sensors.sensor_stop import STOPPED_REASON, stopped
from cdf_platform.orchestration.shared.keys import QUEUE_TAG, SILVER_QUEUE
from cdf_platform.planning.status import WindowState

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

CONSUMER_JOB = "consumer_job"
CONSUMER_SENSOR = "consumer_sensor"
# States of an input whose new versions the consumer's next run reads (NOT_STARTED: its first,
# full run). A LOST input is the rebuild sensor's (`recompute_job`); a missing or blocked one
# waits for its fix.
_READABLE = (WindowState.OK, WindowState.LOW_HEADROOM, WindowState.NOT_STARTED)


def build_consumer_job(consumers: Sequence[ConsumerAsset]) -> "UnresolvedAssetJobDefinition":
    """`consumer_job`: the selected consumers read their inputs' changes since their
    watermarks (what `consumer_sensor` launches)."""
    return dg.define_asset_job(
        CONSUMER_JOB,
        selection=dg.AssetSelection.assets(*(consumer.key for consumer in consumers)),
        tags={QUEUE_TAG: SILVER_QUEUE},
        description="Materialize the selected consumer assets: each reads its inputs' changes "
        "since its own watermarks through the watermark IO manager (consumer_sensor launches "
        "it when an input has new versions).",
    )


def _pending_consumers(instance: dg.DagsterInstance, keys: set[dg.AssetKey]) -> set[dg.AssetKey]:
    """The consumers among `keys` that a run not finished yet materializes (one query)."""
    pending: set[dg.AssetKey] = set()
    for record in instance.get_run_records(dg.RunsFilter(statuses=PENDING_STATUSES)):
        selection = record.dagster_run.asset_selection
        pending |= keys if selection is None else keys & set(selection)
    return pending


def consumer_run_key(consumer: ConsumerAsset, latest: Mapping[str, int | None]) -> str:
    """`consume:<consumer>:<input>@<version>,...`: one run per consumer and input versions."""
    versions = ",".join(f"{input_id}@{latest[input_id]}" for input_id in sorted(latest))
    return f"consume:{consumer.id}:{versions}"


def build_consumer_sensor(
    consumers: Sequence[ConsumerAsset],
    upstream_metadata: Mapping[dg.AssetKey, Mapping],
    job: "UnresolvedAssetJobDefinition",
    *,
    running: bool = True,
) -> dg.SensorDefinition:
    """`consumer_sensor`: a consumer is materialized when any of its inputs has versions after
    its watermark for it, as the incremental sensor runs silver.

    Each tick reads every consumer's watermarks and its inputs' logs (no Spark) and requests
    `consumer_job` for a consumer that is behind on an input it can read incrementally (or has
    never read), unless a run materializing it is pending: that run reads every version up to
    the latest at its start. The run key names the inputs' latest versions, so one input
    version never gets two runs. A consumer whose window is lost is left to the rebuild sensor
    (`recompute_job`).
    """

    @dg.sensor(
        name=CONSUMER_SENSOR,
        job=job,
        minimum_interval_seconds=30,
        description="Requests consumer_job for a consumer asset of the watermark IO manager "
        "when an input has versions after its watermark (one run per input versions, none "
        "while one is pending).",
        default_status=dg.DefaultSensorStatus.RUNNING
        if running
        else dg.DefaultSensorStatus.STOPPED,
    )
    def _consumer_sensor(
        context: dg.SensorEvaluationContext,
        watermark_io_manager: dg.ResourceParam[WatermarkIOManager],
    ) -> dg.SensorResult:
        if stopped(context, context.instance, CONSUMER_SENSOR):
            return dg.SensorResult(skip_reason=dg.SkipReason(STOPPED_REASON))
        pending = _pending_consumers(context.instance, {consumer.key for consumer in consumers})
        requests: list[dg.RunRequest] = []
        waiting: list[str] = []
        for consumer in consumers:
            if consumer.key in pending:
                waiting.append(f"{consumer.id} (run pending)")
                continue
            statuses = consumer.statuses(watermark_io_manager, upstream_metadata)
            if any(status.state not in _READABLE for status in statuses.values()):
                states = ", ".join(f"{i} {s.state.value}" for i, s in statuses.items())
                waiting.append(f"{consumer.id} ({states})")
                continue
            behind = [
                input_id
                for input_id, status in statuses.items()
                if status.watermark is None or (status.version_lag or 0) > 0
            ]
            if not behind:
                continue
            latest = {input_id: status.latest_version for input_id, status in statuses.items()}
            context.log.info("%s: new versions of %s", consumer.id, ", ".join(behind))
            requests.append(
                dg.RunRequest(
                    run_key=consumer_run_key(consumer, latest), asset_selection=[consumer.key]
                )
            )
        if requests:
            return dg.SensorResult(run_requests=requests)
        reason = "every consumer is up to date"
        if waiting:
            reason += f"; not run here: {', '.join(waiting)}"
        return dg.SensorResult(skip_reason=dg.SkipReason(reason))

    return _consumer_sensor
