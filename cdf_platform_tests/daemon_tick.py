"""One tick of the platform's incremental sensor and the runs it requests, in a process of its
own, as the Dagster daemon does them: the definitions `dagster` loads
(`cdf_platform.definitions`, configured only by the environment: `CDF_LAKE_ROOT`,
`CDF_PIPELINES_FILE`, and `CDF_SPARK_MASTER` or `CDF_SPARK_REMOTE` for the Spark mode), each run
request executed as `incremental_job` on its asset selection with the job's tags and the
request's, on the instance in `$DAGSTER_HOME`.

The test process holds a local SparkSession, so runs whose driver must be a standalone cluster's
application or a Spark Connect client run here: `tick_in_a_process` starts
`python -m cdf_platform_tests.daemon_tick REPORT`, which writes what happened to REPORT as JSON
(`TickReport`): the runs, their pipelines, outcome and failed steps, and the JVMs the process
started (its Spark driver, if it had one of its own).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
import psutil
from pydantic import BaseModel, Field

from cdf_platform.orchestration.shared.keys import silver_pipeline_ids
from cdf_platform_tests.cli_session import python_path
from cdf_platform_tests.lake_platform import incremental_tick, run_as_daemon


class StepFailure(BaseModel):
    """A step that failed in a run."""

    step_key: str
    errors: list[str] = Field(description="The error's class, then its causes', outermost first.")
    message: str


class RunReport(BaseModel):
    """One run the tick requested, executed."""

    run_id: str
    run_key: str | None
    pipelines: list[str] = Field(description="The pipelines whose silver the run selected.")
    tags: dict[str, str] = Field(description="The run request's tags.")
    success: bool
    step_failures: list[StepFailure]


class TickReport(BaseModel):
    """What one tick and its runs did."""

    runs: list[RunReport]
    skip_reason: str | None
    jvms: list[int] = Field(
        description="PIDs of the Java processes the tick's process started and still holds "
        "(a Spark driver in the process: local or a standalone cluster's; none over Connect)."
    )


def dagster_home(path: Path) -> Path:
    """A `DAGSTER_HOME` at `path` (created): the default SQLite storage, no telemetry."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "dagster.yaml").write_text("telemetry:\n  enabled: false\n", encoding="utf-8")
    return path


def tick_in_a_process(home: Path, env: Mapping[str, str], report: Path) -> TickReport:
    """One tick and its runs in a process of its own, on the instance in `home`, with this
    process's environment plus `env`; its report is written to `report`."""
    done = subprocess.run(
        [sys.executable, "-m", __name__, str(report)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **env, "DAGSTER_HOME": str(home), "PYTHONPATH": python_path()},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return TickReport.model_validate_json(report.read_text(encoding="utf-8"))


def _step_failures(result: dg.ExecuteInProcessResult) -> list[StepFailure]:
    failures = []
    for event in result.get_step_failure_events():
        error, errors = event.step_failure_data.error, []
        cause = error
        while cause is not None:
            errors.append(cause.cls_name or "")
            cause = cause.cause
        message = error.message if error is not None else ""
        failures.append(StepFailure(step_key=event.step_key or "", errors=errors, message=message))
    return failures


def _jvms() -> list[int]:
    children = psutil.Process().children(recursive=True)
    return [child.pid for child in children if child.name() == "java"]


def main(report: Path) -> None:
    """Tick the incremental sensor of `cdf_platform.definitions`, run what it requests, write
    the report."""
    from cdf_platform.definitions import defs

    definitions = defs()
    runs = []
    with dg.DagsterInstance.get() as instance:
        tick = incremental_tick(definitions, instance)
        for request in tick.run_requests or []:
            result = run_as_daemon(definitions, instance, request)
            runs.append(
                RunReport(
                    run_id=result.run_id,
                    run_key=request.run_key,
                    pipelines=silver_pipeline_ids(request.asset_selection or ()),
                    tags=dict(request.tags or {}),
                    success=result.success,
                    step_failures=_step_failures(result),
                )
            )
    skipped = tick.skip_reason.skip_message if tick.skip_reason else None
    done = TickReport(runs=runs, skip_reason=skipped, jvms=_jvms())
    report.write_text(done.model_dump_json(indent=2), encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
