"""`cdf-platform demo`: the story told in a work folder (wiped first), its lake on the local
disk or in a local S3 server's bucket, then its summary and how to browse it in the Dagster UI.

Example:
    >>> run_demo(workdir=Path(".demo"), batch_size=200, retention_seconds=240)  # doctest: +SKIP
    0
"""

import logging
import signal
import time
from pathlib import Path

from cdf_platform.core.storage import StorageConfig
from cdf_platform.demo.deployment import DeploymentFailed
from cdf_platform.demo.story.outage_story import DemoStory, say
from cdf_platform.demo.story.steps import DemoFailed

logger = logging.getLogger(__name__)


def run_demo(
    *, workdir: Path, batch_size: int, retention_seconds: int, local_s3: bool = False
) -> int:
    """Run the story in `workdir` (wiped first); print the summary; return the exit code.

    With `local_s3`, the lake (bronze, silver, gold and the control tables) lives in a bucket
    of a local S3 server (moto) started for the story and stopped after it; the Dagster
    instance stays in `workdir`.
    """
    if not local_s3:
        return _tell(workdir, batch_size, retention_seconds, None)
    from cdf_platform.services.local_s3 import LocalS3Server

    with LocalS3Server(bucket="demo-lake") as server:
        say(f"local S3 server on {server.endpoint}, lake s3://{server.bucket}/lake")
        return _tell(
            workdir,
            batch_size,
            retention_seconds,
            f"s3://{server.bucket}/lake",
            server.env(),
            server.storage_config(),
        )


def _tell(
    workdir: Path,
    batch_size: int,
    retention_seconds: int,
    lake_root: str | None,
    store_env: dict[str, str] | None = None,
    storage: StorageConfig | None = None,
) -> int:
    started = time.monotonic()
    story = DemoStory(
        workdir,
        batch_size=batch_size,
        retention_seconds=retention_seconds,
        lake_root=lake_root,
        store_env=store_env,
        storage=storage,
    )
    # A SIGTERM ends the story as Ctrl-C does: the deployment's processes are stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        story.tell()
    except (DemoFailed, DeploymentFailed) as err:
        logger.error(
            "demo failed: %s\n%s\n(the deployment's logs: %s)",
            err,
            story.summary(),
            story.workdir / "logs",
        )
        return 1
    print(story.summary())  # noqa: T201 (the demo's report is its output)
    if lake_root is not None:
        print(f"\nDemo finished in {time.monotonic() - started:.0f} s on {lake_root}.")  # noqa: T201
        return 0
    print(  # noqa: T201
        f"\nDemo finished in {time.monotonic() - started:.0f} s. Browse the same runs, sensor "
        "ticks, checks and plots in the Dagster UI:\n\n"
        f"  DAGSTER_HOME={story.home} CDF_LAKE_ROOT={story.lake.lake_root} "
        ".venv/bin/dagster dev -w workspace.demo.yaml\n\n"
        "(or `make dev`), then open http://127.0.0.1:3000"
    )
    return 0
