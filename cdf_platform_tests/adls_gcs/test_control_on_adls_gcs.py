"""The control tables (deltalake, JVM-free) on ADLS (Azurite) and GCS (fake-gcs-server).

On Azurite they are created and written where they live, by concurrent writers: the Blob API's
conditional PUT (`If-None-Match: *`) lets every deltalake commit land exactly once. On
fake-gcs-server, which does not serve the XML API's object PUT deltalake writes with, they are
written to a folder, uploaded, and read back from the store.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from cdf_platform.state.control import ControlTable, LoadLogEntry
from cdf_platform_testkit.azurite import Azurite
from cdf_platform_testkit.fake_gcs import FakeGcsServer
from cdf_platform_testkit.objects import object_names
from cdf_platform_tests.adls_gcs.conftest import adls_store, gcs_store

WRITERS = 4


def _record_run(control: ControlTable, index: int) -> None:
    """What one run of pipeline p<index> writes: its load-log row and its state row."""
    now = datetime.now(UTC)
    control.append_log(
        LoadLogEntry(
            run_id=f"run-{index}",
            pipeline_id=f"p{index}",
            mode="incremental",
            outcome="SUCCESS",
            started_at=now,
            finished_at=now,
            end_version=index,
        )
    )
    control.upsert_state({"pipeline_id": f"p{index}", "last_commit_version": index})


def _write_control(root: str, *, concurrently: bool) -> None:
    """Every control table under `root`: WRITERS runs' rows, a located name, a consumer."""
    control = ControlTable(root)
    control.ensure()
    if concurrently:
        with ThreadPoolExecutor(WRITERS) as pool:
            list(pool.map(lambda index: _record_run(control, index), range(WRITERS)))
    else:
        for index in range(WRITERS):
            _record_run(control, index)
    control.record_location("sales.orders", f"{root}/../bronze/orders", "id-1", located_by="run-0")
    control.record_consumer("gold/revenue", f"{root}/../gold/revenue", "orders", "silver/orders")


def _assert_read_back(control: ControlTable) -> None:
    states = control.read_states()
    assert {p: s["last_commit_version"] for p, s in states.items()} == {
        f"p{i}": i for i in range(WRITERS)
    }
    assert [row["run_id"] for row in control.read_log()] == [f"run-{i}" for i in range(WRITERS)]
    assert control.read_log("p2")[0]["end_version"] == 2
    assert control.read_locations()["sales.orders"]["table_id"] == "id-1"
    (consumer,) = control.read_consumers("silver/orders")
    assert consumer["consumer"] == "gold/revenue"


def test_control_tables_are_created_written_and_read_on_adls(azurite: Azurite) -> None:
    control = ControlTable(f"{adls_store(azurite).fresh_lake()}/_control")
    _write_control(control.root, concurrently=True)

    _assert_read_back(control)
    # One commit per write, none lost or doubled: create + one append per writer.
    commits = [name for name in object_names(control.log_path) if name.endswith(".json")]
    assert len(commits) == 1 + WRITERS


def test_control_tables_uploaded_to_gcs_read_back_there(
    fake_gcs: FakeGcsServer, tmp_path: Path
) -> None:
    store = gcs_store(fake_gcs)
    control = ControlTable(f"{store.fresh_lake()}/_control")
    store.place(control.root, lambda root: _write_control(root, concurrently=False), tmp_path)

    _assert_read_back(control)
