"""The replay window and `status` on ADLS (Azurite) and GCS (fake-gcs-server): the JVM-free
side reads bronze's log, silver's watermark and the control tables from the store, and reports
the loss once the files or commits a replay needs are gone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from deltalake import DeltaTable

from cdf_platform.deltalog.log import DeltaLog
from cdf_platform.planning.status import WindowState, pipeline_status
from cdf_platform.window.criteria import WindowBreakKind
from cdf_platform.window.replay_window import compute_replay_window
from cdf_platform_testkit.azurite import Azurite
from cdf_platform_testkit.objects import delete_object
from cdf_platform_tests.adls_gcs.conftest import adls_store
from cdf_platform_tests.adls_gcs.lake import (
    BRONZE_VERSIONS,
    WATERMARK,
    EmulatedStore,
    build_lake,
    vacuum_change_files,
    write_bronze,
)
from cdf_platform_tests.cli_process import run_cli

LATEST = BRONZE_VERSIONS - 1


def test_status_reports_the_window_then_its_loss(store: EmulatedStore, tmp_path: Path) -> None:
    lake = build_lake(store, tmp_path)
    spec = lake.spec
    assert spec.source.startswith(store.root) and lake.control.root.startswith(store.root)

    before = pipeline_status(spec, lake.control)
    assert (before.state, before.watermark, before.latest_version) == (
        WindowState.OK,
        WATERMARK,
        LATEST,
    )
    assert (before.version_lag, before.earliest_replayable_version) == (LATEST - WATERMARK, 0)
    assert before.replayable and before.headroom_hours is not None and before.headroom_hours > 24

    # VACUUM deletes the change files of the first version silver has not applied.
    removed = vacuum_change_files(spec.source, WATERMARK + 1)
    assert removed and all(name.startswith("_change_data/") for name in removed)

    # `cdf-platform status --json` on that lake, in a process that cannot find Java.
    no_java = {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": str(Path(sys.executable).parent)}
    status = run_cli(
        "status",
        "--json",
        "--pipelines",
        str(lake.layout.pipelines_file),
        env={"CDF_LAKE_ROOT": lake.layout.lake_root, **no_java},
    )
    assert status.returncode == 1, status.stderr
    (figures,) = json.loads(status.stdout)
    assert (figures["state"], figures["watermark"], figures["latest_version"]) == (
        "LOST",
        WATERMARK,
        LATEST,
    )
    assert figures["problem_code"] == "WATERMARK_OUTSIDE_RETENTION"
    assert figures["earliest_replayable_version"] == WATERMARK + 2
    assert removed[0] in figures["problem"]


def test_a_commit_removed_inside_the_range_breaks_the_window(
    store: EmulatedStore, tmp_path: Path
) -> None:
    # A checkpoint after the hole keeps the table itself readable, as log cleanup leaves it.
    lake = build_lake(store, tmp_path, checkpoint=True)
    bronze = lake.spec.source
    missing = WATERMARK + 1
    delete_object(bronze, f"_delta_log/{missing:020d}.json")

    window = compute_replay_window(bronze)
    found = window.break_for(WATERMARK)
    assert found is not None
    assert (found.kind, found.version) == (WindowBreakKind.COMMIT_MISSING, missing)
    status = pipeline_status(lake.spec, lake.control)
    assert status.state is WindowState.LOST
    assert f"{missing:020d}.json is gone" in found.detail, found.detail
    assert status.problem_code == "WATERMARK_OUTSIDE_RETENTION"


def test_az_and_abfss_uris_name_the_same_table_on_azurite(azurite: Azurite, tmp_path: Path) -> None:
    store = adls_store(azurite)
    lake = store.fresh_lake()
    relative = lake.removeprefix(f"{store.root}/")
    as_az, as_abfss = f"{lake}/bronze", f"{azurite.abfss_root()}/{relative}/bronze"
    write_bronze(as_abfss)

    here, there = DeltaLog(as_az), DeltaLog(as_abfss)
    assert here.commit_versions() == there.commit_versions() == tuple(range(BRONZE_VERSIONS))
    assert here.table_id() == there.table_id() == DeltaTable(as_az).metadata().id
    assert here.table_files == there.table_files
    assert compute_replay_window(as_abfss).earliest_replayable_version == 0
