"""Names the Dagster layer shares: asset keys, op names, pools and run tags.

Asset keys follow docs/design.md section 8: `bronze/<table>` and `silver/<pipeline id>`.
"""

from collections.abc import Iterable

import dagster as dg

from cdf_platform.core.spec.pipeline_spec import PipelineSpec

BRONZE_PREFIX = "bronze"
SILVER_PREFIX = "silver"
# Run tag naming the pipeline of a run (sensors set it; handy for filtering runs in the UI).
PIPELINE_TAG = "cdf_platform/pipeline_id"
# Run tag naming the table a maintenance run vacuums, by its asset key (`bronze/<table>`).
TABLE_TAG = "cdf_platform/table"
# Run tag naming the incident a rebuild repairs.
INCIDENT_TAG = "cdf_platform/incident_code"
# Run tag naming the queue a run waits in: the platform's jobs set it (`silver` for the runs that
# write silver or a consumer, `checks` for checks_job), so the instance's dagster.yaml can keep
# run slots for the checks however many silver runs are queued (deploy/dagster.yaml).
QUEUE_TAG = "cdf_platform/queue"
SILVER_QUEUE = "silver"
CHECKS_QUEUE = "checks"
# Run tag of a run the incremental sensor requested: what it asked of each pipeline the run
# covers (`<id>=<reason>:<key>,...`), so a pipeline whose run failed in its own code is not
# asked the same thing again.
REQUESTED_TAG = "cdf_platform/requested"
# Dagster's own run tags the sensors read or set: a run's failure reason, whether Dagster's run
# retries will re-execute a failed run and the retry's id, and a queued run's priority (higher
# first).
FAILURE_REASON_TAG = "dagster/failure_reason"
WILL_RETRY_TAG = "dagster/will_retry"
AUTO_RETRY_RUN_ID_TAG = "dagster/auto_retry_run_id"
PRIORITY_TAG = "dagster/priority"
# The tags the daemon sets on a run a sensor requested: the UI names the sensor on the run's page.
SENSOR_NAME_TAG = "dagster/sensor_name"
RUN_KEY_TAG = "dagster/run_key"
# Run tag of a run that carried out a destructive setting the deployment permits (the
# settings it asked for, comma-separated): the alert sensor tells of it when the run ends.
DESTRUCTIVE_TAG = "cdf_platform/destructive"
# Run tag asking the watermark IO manager for a full read of every input (recompute_job sets it).
FULL_RECOMPUTE_TAG = "cdf_platform/full_recompute"
# The watermark IO manager's resource key: bronze and silver assets name it, so an asset that
# takes them as inputs loads their changes through it.
WATERMARK_IO_MANAGER_KEY = "watermark_io_manager"


def bronze_key(spec: PipelineSpec) -> dg.AssetKey:
    """The bronze asset `spec` reads: `bronze/<bronze_name>`."""
    return dg.AssetKey([BRONZE_PREFIX, spec.bronze_name])


def silver_key(pipeline_id: str) -> dg.AssetKey:
    """The silver asset of a pipeline: `silver/<pipeline_id>`."""
    return dg.AssetKey([SILVER_PREFIX, pipeline_id])


def silver_pipeline_ids(keys: Iterable[dg.AssetKey]) -> list[str]:
    """The pipelines whose silver assets are among `keys` (the inverse of `silver_key`)."""
    return [key.path[1] for key in keys if len(key.path) == 2 and key.path[0] == SILVER_PREFIX]


def silver_op_name(pipeline_id: str) -> str:
    """The op name of a silver asset (the key of its config in run config)."""
    return silver_key(pipeline_id).to_python_identifier()


def pipeline_pool(pipeline_id: str) -> str:
    """The Dagster pool of a pipeline's silver asset.

    Every run that writes a pipeline's silver table (incremental or rebuild) holds this pool, so
    with a limit of 1 at run granularity at most one such run is in progress. In the instance's
    dagster.yaml:

        concurrency:
          pools:
            granularity: run   # the limit counts runs holding the pool, not ops
            default_limit: 1   # every cdf_pipeline_* pool without an explicit limit

    or per pool: `dagster instance concurrency set cdf_pipeline_orders 1`.
    """
    return f"cdf_pipeline_{pipeline_id}"
