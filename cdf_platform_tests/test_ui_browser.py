"""The Dagster UI in a real browser: headless Chromium against `dagster dev` serving the demo's
instance (as `make dev` does) after the demo's story (`cdf-platform demo`, small batches) ran on
its deployment. The outage is read where a user looks: the Overview timeline, Jobs, rebuild_job's
runs, the sensors' pages, the silver checks' plots (headroom shrinking before the loss). The
check pages (silver's, and gold's: a consumer of the watermark IO manager) and the all-pipelines
overview are read at 1,000 px. Screenshots land in `$CDF_UI_SCREENSHOTS` (default: the test's
temp folder); the test prints the folder."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from cdf_platform.demo.story.outage_story import HEADROOM_EVALUATIONS, DemoStory
from cdf_platform.orchestration.checks.silver_checks import REPLAY_WINDOW
from cdf_platform.orchestration.shared.keys import SENSOR_NAME_TAG
from cdf_platform_testkit.dagster_dev import dagster_dev
from cdf_platform_tests.lake_platform import check_figures

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
LOCATION = "cdf_platform.demo.demo_definitions"
# How many lines the text of each element takes.
LINES_OF_TEXT = """cells => cells.map(cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    return range.getClientRects().length;
})"""

pytestmark = [
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium on this machine (`make test` installs Debian's chromium as root)",
    ),
    pytest.mark.heavy,
    pytest.mark.long(minutes=8),
    # The demo's story (its setup, 5-8 minutes on the busy 2-core machine) and the browser.
    pytest.mark.timeout(1200),
]


SCREENSHOTS_ENV = "CDF_UI_SCREENSHOTS"


@pytest.fixture
def served_demo(tmp_path: Path) -> Iterator[tuple[str, dict[str, list[str]], list[float]]]:
    """The demo's story (`cdf-platform demo`: its deployment, small batches), then `dagster
    dev` serving its instance as `make dev` does; yields the URL, the ids of the runs each
    sensor launched (the rebuild sensor's as the story saw them), and silver/orders's plotted
    `headroom_hours`, oldest first."""
    workdir = tmp_path / "demo"
    # The story hands its processes their instance and lake; this process's are left alone.
    story = DemoStory(workdir, batch_size=20, retention_seconds=150)
    story.tell()
    instance = dg.DagsterInstance.from_config(str(story.home))
    headroom = check_figures(
        instance,
        dg.AssetKey(["silver", "orders"]),
        REPLAY_WINDOW,
        "headroom_hours",
        dg.FloatMetadataValue,
    )
    launched = {
        sensor: [
            run.run_id
            for run in instance.get_runs(filters=dg.RunsFilter(tags={SENSOR_NAME_TAG: sensor}))
        ]
        for sensor in ("incremental_sensor", "rebuild_sensor")
    }
    assert sorted(launched["rebuild_sensor"]) == sorted(story.rebuild_runs)
    instance.dispose()
    env = {"DAGSTER_HOME": str(story.home), "CDF_LAKE_ROOT": story.lake.lake_root}
    with dagster_dev(env, "workspace.demo.yaml") as url:
        yield url, launched, headroom


def _dismiss_welcome(page: Any) -> None:
    """Close the UI's first-visit community dialog if it shows up (it covers the page)."""
    skip = page.get_by_role("button", name="Skip")
    try:
        skip.first.wait_for(state="visible", timeout=5_000)
    except Exception:  # no dialog this time
        return
    skip.first.click()


def test_the_demos_outage_story_in_a_real_browser(
    served_demo: tuple[str, dict[str, list[str]], list[float]], tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, launched, headroom = served_demo
    rebuild_runs = launched["rebuild_sensor"]
    shots = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    # The headroom plot tells the outage: caught up, the whole retention ahead (the demo's
    # 150 s, 0.04 h); then, paused, strictly less at each evaluation; 0 at the loss; the whole
    # retention again after the rebuild. Never a negative point.
    assert all(point >= 0.0 for point in headroom), headroom
    loss = headroom.index(0.0)
    paused = headroom[loss - HEADROOM_EVALUATIONS : loss]
    assert headroom[0] == 0.04, headroom
    assert len(paused) == HEADROOM_EVALUATIONS and paused[-1] > 0.0, headroom
    assert all(b < a for a, b in itertools.pairwise(paused)), headroom
    assert headroom[-1] == 0.04, headroom
    # The sensor launched one rebuild per pipeline (orders, customers, accounts).
    assert len(rebuild_runs) == 3, rebuild_runs

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(90_000)

        page.goto(f"{url}/asset-groups")
        for group in ("bronze", "silver", "gold"):
            expect(page.get_by_role("button", name=f"asset_group {group} {group}")).to_be_visible()
        page.screenshot(path=str(shots / "asset_graph.png"), full_page=True)
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
        page.screenshot(path=str(shots / "asset_catalog.png"), full_page=True)

        # At 1,000 px, each check page plots its figures and shows its limit as text: a figure
        # is named twice (metadata and plot title), a text value once.
        page.set_viewport_size({"width": 1000, "height": 1800})
        page.goto(f"{url}/assets/silver/orders?view=checks")
        _dismiss_welcome(page)
        expect(page.get_by_text("replay_window").first).to_be_visible()
        page.get_by_text("replay_window").first.click()
        # Caught up, the whole retention ahead and above the demo's limit: green.
        expect(page.get_by_text("Passed").first).to_be_visible()
        expect(page.get_by_text("can never be met")).to_have_count(0)
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
        expect(page.get_by_text("warns below 0.02 h (min_headroom_hours)")).to_be_visible()
        page.screenshot(path=str(shots / "replay_window_check.png"), full_page=True)
        page.get_by_text("consumer_lag").first.click()
        expect(page.get_by_text("fails above 24 h (max_allowed_lag_hours)")).to_be_visible()
        for figure in ("version_lag", "data_version_lag", "lag_hours", "watermark"):
            expect(page.get_by_text(figure, exact=True)).to_have_count(2)
        page.screenshot(path=str(shots / "consumer_lag_check.png"), full_page=True)

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
        page.screenshot(path=str(shots / "gold_replay_window_check.png"), full_page=True)
        page.get_by_text("consumer_lag").first.click()
        for figure in ("version_lag", "data_version_lag", "lag_hours", "watermark"):
            expect(page.get_by_text(figure, exact=True)).to_have_count(2)
        page.screenshot(path=str(shots / "gold_consumer_lag_check.png"), full_page=True)

        # Every pipeline on one page: the overview's table, a figure never broken over two lines.
        page.goto(f"{url}/assets/platform/pipelines?view=events")
        _dismiss_welcome(page)
        expect(page.get_by_text("unhealthy_pipelines").first).to_be_visible()
        expect(page.get_by_role("columnheader", name="headroom h/min")).to_be_visible()
        # Caught up: the headroom is the retention horizon (0.04 h), as the check plots it and
        # `status` prints it, against the demo's limit.
        for row in (
            "orders OK 0.00/24 0.04/0.02",
            "customers OK 0.00/24 0.04/0.02",
            "accounts OK 0.00/24 0.04/0.02",
        ):
            expect(page.get_by_role("row", name=row).first).to_be_visible()
        expect(page.get_by_text("Problems: none.")).to_be_visible()
        # (The "/" escaped: Playwright passes the pattern on as a JavaScript regex literal.)
        figures = page.get_by_role("cell", name=re.compile(r"^\d+\.\d\d\/\d+$"))
        expect(figures).to_have_count(3)
        assert figures.evaluate_all(LINES_OF_TEXT) == [1, 1, 1]
        page.screenshot(path=str(shots / "all_pipelines.png"), full_page=True)

        # The runs list: each red run says why (the incident tag), the story's own runs who
        # launched them; the run worker's process tag is hidden (a `.dagster/` key).
        page.set_viewport_size({"width": 1600, "height": 1400})
        page.goto(f"{url}/runs")
        _dismiss_welcome(page)
        expect(page.get_by_text("WATERMARK_OUTSIDE_RETENTION").first).to_be_visible()
        expect(page.get_by_text("cdf-platform demo").first).to_be_visible()
        expect(page.get_by_text("run_worker")).to_have_count(0)
        page.screenshot(path=str(shots / "runs_list.png"), full_page=True)
        page.set_viewport_size({"width": 1000, "height": 1800})

        # The repair can be traced: the rebuild's run page names the sensor that launched it.
        page.goto(f"{url}/runs/{rebuild_runs[0]}")
        _dismiss_welcome(page)
        page.get_by_text("View tags and config").first.click()
        expect(page.get_by_text("rebuild_sensor").first).to_be_visible()
        expect(page.get_by_text("WATERMARK_OUTSIDE_RETENTION").first).to_be_visible()
        page.screenshot(path=str(shots / "rebuild_run.png"), full_page=True)

        # The demo's runs are the code location's: the Overview timeline has a row per job,
        # the rebuild sensor's among them.
        job_page = f"{url}/locations/__repository__@{LOCATION}"
        page.set_viewport_size({"width": 1600, "height": 1000})
        page.goto(f"{url}/overview/activity/timeline")
        _dismiss_welcome(page)
        for job in ("demo_bronze_job", "incremental_job", "checks_job", "rebuild_job"):
            expect(page.get_by_role("link", name=job).first).to_be_visible()
        page.screenshot(path=str(shots / "overview_timeline.png"), full_page=True)
        page.goto(f"{url}/jobs")
        _dismiss_welcome(page)
        expect(page.get_by_role("link", name="rebuild_job").first).to_be_visible()
        page.screenshot(path=str(shots / "jobs.png"), full_page=True)
        # rebuild_job's Runs tab lists the sensor's rebuilds, launched by rebuild_sensor.
        page.goto(f"{job_page}/jobs/rebuild_job/runs")
        _dismiss_welcome(page)
        for run_id in rebuild_runs:
            expect(page.get_by_text(run_id[:8], exact=True).first).to_be_visible()
        expect(page.get_by_text("rebuild_sensor").first).to_be_visible()
        page.screenshot(path=str(shots / "rebuild_job_runs.png"), full_page=True)
        # The sensor's page: the tick that requested them, and its runs.
        page.goto(f"{job_page}/sensors/rebuild_sensor")
        _dismiss_welcome(page)
        expect(page.get_by_text(f"{len(rebuild_runs)} runs requested").first).to_be_visible()
        page.screenshot(path=str(shots / "rebuild_sensor.png"), full_page=True)
        page.get_by_role("button", name="Runs", exact=True).click()
        for run_id in rebuild_runs:
            expect(page.get_by_text(run_id[:8], exact=True).first).to_be_visible()
        page.screenshot(path=str(shots / "rebuild_sensor_runs.png"), full_page=True)
        # incremental_sensor's runs: the story's loads and catch-ups (2 before the pause, 1
        # after), each launched by the sensor.
        assert len(launched["incremental_sensor"]) >= 3, launched
        page.goto(f"{job_page}/sensors/incremental_sensor")
        _dismiss_welcome(page)
        page.get_by_role("button", name="Runs", exact=True).click()
        for run_id in launched["incremental_sensor"]:
            expect(page.get_by_text(run_id[:8], exact=True).first).to_be_visible()
        page.screenshot(path=str(shots / "incremental_sensor.png"), full_page=True)
        # The headroom plot, at full width: shrinking while paused, 0 at the loss.
        page.set_viewport_size({"width": 1600, "height": 1700})
        page.goto(f"{url}/assets/silver/orders?view=checks")
        _dismiss_welcome(page)
        page.get_by_text("replay_window").first.click()
        expect(page.get_by_text("headroom_hours", exact=True)).to_have_count(2)
        page.screenshot(path=str(shots / "headroom_plot.png"), full_page=True)

        # The watermark IO manager is a resource of the code location, beside spark and lake.
        page.goto(f"{url}/locations/__repository__@{LOCATION}/resources")
        _dismiss_welcome(page)
        for resource in ("watermark_io_manager", "spark", "lake"):
            expect(page.get_by_text(resource, exact=True).first).to_be_visible()
        page.screenshot(path=str(shots / "resources.png"), full_page=True)

        # Silver's freshness policy: consumer_lag's limit (24 hours for the demo's orders).
        page.goto(f"{url}/assets/silver/orders")
        _dismiss_welcome(page)
        expect(page.get_by_text("Freshness policy").first).to_be_visible()
        expect(
            page.get_by_text("Fails if more than 24 hours since last materialization")
        ).to_be_visible()
        expect(page.get_by_text("Passing").first).to_be_visible()
        page.screenshot(path=str(shots / "freshness.png"), full_page=True)
        browser.close()

    names = (
        "asset_graph",
        "asset_catalog",
        "replay_window_check",
        "consumer_lag_check",
        "gold_replay_window_check",
        "gold_consumer_lag_check",
        "all_pipelines",
        "runs_list",
        "rebuild_run",
        "overview_timeline",
        "jobs",
        "rebuild_job_runs",
        "rebuild_sensor",
        "rebuild_sensor_runs",
        "incremental_sensor",
        "headroom_plot",
        "resources",
        "freshness",
    )
    for shot in (shots / f"{name}.png" for name in names):
        assert shot.stat().st_size > 10_000
    print(f"screenshots in {shots}", file=sys.stderr)
