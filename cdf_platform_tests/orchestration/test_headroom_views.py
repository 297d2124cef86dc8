"""One headroom for a pipeline in every view: `cdf-platform status --json`, the replay_window
check's metadata and the `platform/pipelines` overview agree in each state (caught up, behind,
lost, right after a rebuild), and only a closed window reads 0. Caught up, every view gives the
retention horizon: the headroom bronze's next commit starts with."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.cli import main
from cdf_platform.core.sql import sql_path
from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.jobs.silver_jobs import rebuild_run_config
from cdf_platform.orchestration.shared.keys import silver_key
from cdf_platform.orchestration.shared.resources import LakeLayout
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform_tests.lake_platform import (
    ORDERS,
    bronze_batch,
    lake_defs,
    vacuum_breaking_the_window,
)

OVERVIEW = dg.AssetKey(["platform", "pipelines"])


def headrooms(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    lake: LakeLayout,
    capsys: pytest.CaptureFixture[str],
) -> tuple[float | None, float | None, float | None]:
    """The orders pipeline's headroom as `status --json` (run in this process, through the
    CLI's entry point), the replay_window check and the overview give it (hours to 2
    decimals; None where each says there is none)."""
    capsys.readouterr()
    main(
        ["status", "--json", "--pipelines", str(lake.pipelines_file), "--lake-root", lake.lake_root]
    )
    (status,) = [s for s in json.loads(capsys.readouterr().out) if s["pipeline_id"] == "orders"]
    from_status = status["headroom_hours"]

    checks = defs.resolve_job_def("checks_job").execute_in_process(
        instance=instance, raise_on_error=False
    )
    (evaluation,) = [
        e
        for e in checks.get_asset_check_evaluations()
        if e.asset_key == silver_key("orders") and e.check_name == REPLAY_WINDOW
    ]
    from_check = evaluation.metadata["headroom_hours"].value
    assert isinstance(from_check, float)

    (overview,) = checks.asset_materializations_for_node(OVERVIEW.to_python_identifier())
    table = str(overview.metadata["pipelines"].value)
    (cell,) = re.findall(r"^\| orders \| \w+ \| [^|]+ \| ([^|]+) \|$", table, flags=re.M)
    from_overview = None if cell.strip() == "-" else float(cell.split("/")[0])

    return (
        None if from_status is None else round(from_status, 2),
        from_check,
        from_overview,
    )


def agreed(views: tuple[float | None, float | None, float | None]) -> float | None:
    """The one headroom all three views give (within a minute of hours: they are read seconds
    apart while a deadline runs)."""
    first = views[0]
    for other in views[1:]:
        if first is None or other is None:
            assert first is other, views
        else:
            assert abs(first - other) <= 0.02, views
    return first


def test_status_checks_and_overview_give_one_headroom_in_every_state(
    spark: SparkSession,
    spark_resource: SparkResource,
    lake: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    defs = lake_defs(spark_resource, lake, ORDERS)
    layout = defs.resources["lake"]  # type: ignore[index]
    assert isinstance(layout, LakeLayout)
    bronze = str(lake / "bronze" / "orders")
    instance = dg.DagsterInstance.ephemeral()

    bronze_batch(defs, "orders", instance, 20)
    assert defs.resolve_job_def("incremental_job").execute_in_process(instance=instance).success
    # Caught up: the whole retention (the default 7 days) is ahead of bronze's next commit.
    assert agreed(headrooms(defs, instance, layout, capsys)) == 168.0

    bronze_batch(defs, "orders", instance, 20)  # behind: the default 7 days run down
    behind = agreed(headrooms(defs, instance, layout, capsys))
    assert behind is not None and 167.0 < behind <= 168.0

    vacuum_breaking_the_window(spark, bronze)
    assert agreed(headrooms(defs, instance, layout, capsys)) == 0.0  # lost: the window has closed

    # Rebuilt while bronze keeps changes for 3 hours: caught up again, so the headroom is that
    # retention again, not the 0 of the loss beside an OK state.
    retention = "'delta.deletedFileRetentionDuration'"
    spark.sql(f"ALTER TABLE {sql_path(bronze)} SET TBLPROPERTIES ({retention} = '3 hours')")
    rebuilt = defs.resolve_job_def("rebuild_job").execute_in_process(
        instance=instance,
        run_config=rebuild_run_config("orders"),
        asset_selection=[silver_key("orders")],
    )
    assert rebuilt.success
    assert agreed(headrooms(defs, instance, layout, capsys)) == 3.0
