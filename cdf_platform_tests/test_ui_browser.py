"""The Dagster UI in a real browser: headless Chromium against `dagster dev` serving the project
after a small demo run. The check pages (silver's, and gold's: a consumer of the watermark IO
manager) and the all-pipelines overview are read at 1,000 px.
Screenshots land in the test's temp folder."""

from __future__ import annotations

import itertools
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from pyspark.sql import SparkSession

from cdf_platform.demo.story import sensor_run_tags
from cdf_platform.orchestration.checks import REPLAY_WINDOW
from cdf_platform.orchestration.resources import SparkResource
from cdf_platform_tests.bronze import set_deleted_file_retention
from cdf_platform_tests.dagster_dev import dagster_dev
from cdf_platform_tests.lake_platform import (
    bronze_batch,
    check_figures,
    lake_defs,
    vacuum_breaking_the_window,
)

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Flags for a root, sandboxed-network machine: no sandbox, no GPU, no background traffic.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# workspace.demo.yaml's code location (named after its module).
LOCATION = "cdf_platform.demo.definitions"
# How many lines the text of each element takes.
LINES_OF_TEXT = """cells => cells.map(cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    return range.getClientRects().length;
})"""

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no Chromium on this machine (`make test` installs Debian's chromium when run as root)",
)


# Check evaluations while silver is paused, at least 0.01 h apart (a plotted figure's 2
# decimals), on a bronze keeping 150 s of history (the demo's compression of a week).
PAUSED_EVALUATIONS = 3
EVALUATION_SPACING_S = 37.0


@pytest.fixture
def served_demo(
    spark: SparkSession, spark_resource: SparkResource, tmp_path: Path
) -> Iterator[tuple[str, str, list[float]]]:
    """A small demo run on a persistent instance, with an outage whose lost window the rebuild
    sensor repairs, then `dagster dev` serving it; yields the URL, the rebuild's run id and
    silver/orders's plotted `headroom_hours`, oldest first."""
    lake = tmp_path / "lake"
    lake.mkdir()
    home = tmp_path / "dagster_home"
    home.mkdir()
    defs = lake_defs(spark_resource, lake)
    instance = dg.DagsterInstance.from_config(str(home))
    for table in ("orders", "customers"):
        bronze_batch(defs, table, instance, 50)
    assert defs.resolve_job_def("incremental_job").execute_in_process(instance=instance).success
    assert defs.resolve_job_def("gold_job").execute_in_process(instance=instance).success
    # An outage: orders, keeping 150 s of history, moves on while silver is paused; the checks
    # plot its headroom running down; VACUUM breaks its window, the checks see it, and the
    # rebuild sensor's request is launched as the daemon launches it.
    orders = str(lake / "bronze" / "orders")
    set_deleted_file_retention(spark, orders, "interval 150 seconds")
    bronze_batch(defs, "orders", instance, 10)
    checks_job = defs.resolve_job_def("checks_job")
    for n in range(PAUSED_EVALUATIONS):
        if n:
            time.sleep(EVALUATION_SPACING_S)
        checks_job.execute_in_process(instance=instance, raise_on_error=False)
    vacuum_breaking_the_window(spark, orders)
    assert not checks_job.execute_in_process(instance=instance, raise_on_error=False).success
    sensor = defs.resolve_sensor_def("rebuild_sensor")
    with dg.build_sensor_context(instance=instance, definitions=defs) as context:
        tick = sensor(context)
    assert isinstance(tick, dg.SensorResult)
    (request,) = tick.run_requests or []
    rebuilt = defs.resolve_job_def("rebuild_job").execute_in_process(
        instance=instance,
        run_config=request.run_config,
        asset_selection=list(request.asset_selection or []),
        tags=sensor_run_tags(sensor.name, request),
    )
    assert rebuilt.success
    # Silver's rebuild is a MERGE: gold follows it incrementally.
    assert defs.resolve_job_def("gold_job").execute_in_process(instance=instance).success
    for _ in range(2):  # evaluations to plot
        assert checks_job.execute_in_process(instance=instance).success
    headroom = check_figures(
        instance,
        dg.AssetKey(["silver", "orders"]),
        REPLAY_WINDOW,
        "headroom_hours",
        dg.FloatMetadataValue,
    )
    instance.dispose()

    env = {
        "DAGSTER_HOME": str(home),
        "CDF_LAKE_ROOT": str(lake),
        "CDF_PIPELINES_FILE": str(lake / "pipelines.yaml"),
    }
    with dagster_dev(env, "workspace.demo.yaml") as url:
        yield url, rebuilt.run_id, headroom


def _dismiss_welcome(page: Any) -> None:
    """Close the UI's first-visit community dialog if it shows up (it covers the page)."""
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.first.wait_for(state="visible", timeout=5_000)
    except Exception:  # no dialog this time
        return
    skip.first.click()


def test_asset_graph_and_replay_window_check_in_a_real_browser(
    served_demo: tuple[str, str, list[float]], tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, rebuild_run_id, headroom = served_demo
    # The headroom plot tells the outage: caught up, the whole retention ahead (7 days at the
    # first runs); then, paused on a 150 s retention, strictly less at each evaluation; 0 at the
    # loss; the whole retention again after the rebuild. Never a negative point.
    assert all(point >= 0.0 for point in headroom), headroom
    loss = headroom.index(0.0)
    paused = headroom[loss - PAUSED_EVALUATIONS : loss]
    assert headroom[0] == 168.0, headroom
    assert len(paused) == PAUSED_EVALUATIONS and paused[-1] > 0.0, headroom
    assert all(b < a for a, b in itertools.pairwise(paused)), headroom
    assert headroom[-2:] == [168.0, 168.0], headroom

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(90_000)

        page.goto(f"{url}/asset-groups")
        for group in ("bronze", "silver", "gold"):
            expect(page.get_by_role("button", name=f"asset_group {group} {group}")).to_be_visible()
        page.screenshot(path=str(tmp_path / "asset_graph.png"), full_page=True)
        page.goto(f"{url}/assets")
        _dismiss_welcome(page)
        for key in (
            "bronze / orders",
            "bronze / customers",
            "silver / orders",
            "silver / customers",
            "gold / customer_order_totals",
        ):
            expect(page.get_by_role("link", name=key).first).to_be_visible()
        page.screenshot(path=str(tmp_path / "asset_catalog.png"), full_page=True)

        # At 1,000 px, each check page plots its figures and shows its limit as text: a figure
        # is named twice (metadata and plot title), a text value once.
        page.set_viewport_size({"width": 1000, "height": 1800})
        page.goto(f"{url}/assets/silver/orders?view=checks")
        _dismiss_welcome(page)
        expect(page.get_by_text("replay_window").first).to_be_visible()
        page.get_by_text("replay_window").first.click()
        expect(page.get_by_text("Passed").first).to_be_visible()
        expect(page.get_by_text("Plots").first).to_be_visible()
        for figure in (
            "headroom_hours",
            "retention_horizon_hours",
            "earliest_replayable_version",
            "watermark",
        ):
            expect(page.get_by_text(figure, exact=True)).to_have_count(2)
        for shown in ("latest_version", "limit", "replayable", "problem_code"):
            expect(page.get_by_text(shown, exact=True)).to_have_count(1)
        expect(page.get_by_text("warns below 1 h (min_headroom_hours)")).to_be_visible()
        page.screenshot(path=str(tmp_path / "replay_window_check.png"), full_page=True)
        page.get_by_text("consumer_lag").first.click()
        expect(page.get_by_text("fails above 24 h (max_allowed_lag_hours)")).to_be_visible()
        for figure in ("version_lag", "data_version_lag", "lag_hours", "watermark"):
            expect(page.get_by_text(figure, exact=True)).to_have_count(2)
        page.screenshot(path=str(tmp_path / "consumer_lag_check.png"), full_page=True)

        # Gold, a consumer of the watermark IO manager, has the same checks and plots.
        page.goto(f"{url}/assets/gold/customer_order_totals?view=checks")
        _dismiss_welcome(page)
        page.get_by_text("replay_window").first.click()
        expect(page.get_by_text("Passed").first).to_be_visible()
        expect(page.get_by_text("Plots").first).to_be_visible()
        for figure in ("headroom_hours", "earliest_replayable_version", "watermark"):
            expect(page.get_by_text(figure, exact=True)).to_have_count(2)
        for shown in ("input", "fallback_mode", "limit", "problem_code"):
            expect(page.get_by_text(shown, exact=True)).to_have_count(1)
        expect(page.get_by_text("silver/orders", exact=True).first).to_be_visible()
        page.screenshot(path=str(tmp_path / "gold_replay_window_check.png"), full_page=True)
        page.get_by_text("consumer_lag").first.click()
        for figure in ("version_lag", "data_version_lag", "lag_hours", "watermark"):
            expect(page.get_by_text(figure, exact=True)).to_have_count(2)
        page.screenshot(path=str(tmp_path / "gold_consumer_lag_check.png"), full_page=True)

        # Every pipeline on one page: the overview's table, a figure never broken over two lines.
        page.goto(f"{url}/assets/platform/pipelines?view=events")
        _dismiss_welcome(page)
        expect(page.get_by_text("unhealthy_pipelines").first).to_be_visible()
        expect(page.get_by_role("columnheader", name="headroom h/min")).to_be_visible()
        # Caught up: no deadline runs, so no headroom (`-`, as `status` prints it).
        for row in ("orders OK 0.00/24 -", "customers OK 0.00/24 -"):
            expect(page.get_by_role("row", name=row).first).to_be_visible()
        expect(page.get_by_text("Problems: none.")).to_be_visible()
        # (The "/" escaped: Playwright passes the pattern on as a JavaScript regex literal.)
        figures = page.get_by_role("cell", name=re.compile(r"^\d+\.\d\d\/\d+$"))
        expect(figures).to_have_count(2)
        assert figures.evaluate_all(LINES_OF_TEXT) == [1, 1]
        page.screenshot(path=str(tmp_path / "all_pipelines.png"), full_page=True)

        # The repair can be traced: the rebuild's run page names the sensor that launched it.
        page.goto(f"{url}/runs/{rebuild_run_id}")
        _dismiss_welcome(page)
        page.get_by_text("View tags and config").first.click()
        expect(page.get_by_text("rebuild_sensor").first).to_be_visible()
        expect(page.get_by_text("WATERMARK_OUTSIDE_RETENTION").first).to_be_visible()
        page.screenshot(path=str(tmp_path / "rebuild_run.png"), full_page=True)

        # The watermark IO manager is a resource of the code location, beside spark and lake.
        page.goto(f"{url}/locations/__repository__@{LOCATION}/resources")
        _dismiss_welcome(page)
        for resource in ("watermark_io_manager", "spark", "lake"):
            expect(page.get_by_text(resource, exact=True).first).to_be_visible()
        page.screenshot(path=str(tmp_path / "resources.png"), full_page=True)

        # Silver's freshness policy: consumer_lag's limit (24 hours for the demo's orders).
        page.goto(f"{url}/assets/silver/orders")
        _dismiss_welcome(page)
        expect(page.get_by_text("Freshness policy").first).to_be_visible()
        expect(
            page.get_by_text("Fails if more than 24 hours since last materialization")
        ).to_be_visible()
        expect(page.get_by_text("Passing").first).to_be_visible()
        page.screenshot(path=str(tmp_path / "freshness.png"), full_page=True)
        browser.close()

    shots = (
        "asset_graph",
        "asset_catalog",
        "replay_window_check",
        "consumer_lag_check",
        "gold_replay_window_check",
        "gold_consumer_lag_check",
        "all_pipelines",
        "rebuild_run",
        "resources",
        "freshness",
    )
    for shot in (f"{name}.png" for name in shots):
        assert (tmp_path / shot).stat().st_size > 10_000
    print(f"screenshots in {tmp_path}", file=sys.stderr)
