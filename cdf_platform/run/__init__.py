"""Running a pipeline: planned and pinned from the logs (JVM-free), then a no-op, an advance, an
incremental run, an initial load, a snapshot source's run or a rebuild, with the fallback
policy, the control tables and the load log. `PipelineRunner` is the one entry.

Where each concern lives:

- `runner`: `PipelineRunner` (prepare, finish, run) and the choice of what a plan leads to;
- `strategy`: how a pipeline's changes reach silver, one class per source kind, chosen once
  from its spec;
- `rebuild_policy`: what a requested rebuild does for the entry that asks (`RunEntry`): the
  FAIL_FAST refusal, a loss repaired already, the audit record of an override;
- `incremental`, `snapshot`, `advance`: the three kinds of write;
- `tuning`: the Spark settings a run changes for its own steps;
- `record`: the load-log and state rows, and the run's result;
- `context`: one run in progress (its stage marks among its figures) and what it did.

When an orchestrator launches the run, `PipelineRunner.finish` takes when it created, dequeued
and launched it as plain times (`OrchestratorTimes`): the load log's row then accounts for the
run from its creation.

Example:
    >>> runner = PipelineRunner.on(ControlTable(root), lambda: spark)  # doctest: +SKIP
    >>> result = runner.run(spec)  # doctest: +SKIP
    >>> result.mode, result.end_version  # doctest: +SKIP
    (<RunMode.INCREMENTAL: 'incremental'>, 57)
"""

from cdf_platform.run.rebuild_policy import RunEntry
from cdf_platform.run.runner import PipelineRunner, PreparedRun, SessionFor
from cdf_platform.state.load_log import OrchestratorTimes

__all__ = ["OrchestratorTimes", "PipelineRunner", "PreparedRun", "RunEntry", "SessionFor"]
