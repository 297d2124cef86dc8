"""A local `_delta_log` listing while a writer commits beside it: files that vanish between the
listing and their stat (a writer's temporary file renamed into its commit, as deltalake commits)
are left out, never an error for the reader (a sensor, `status`) that happened to look then."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from cdf_platform.deltalog.table_files import LOG_FOLDER
from cdf_platform.deltalog.table_storage import LocalStorage


def test_a_listing_beside_a_committing_writer_never_fails(tmp_path: Path) -> None:
    log = tmp_path / LOG_FOLDER
    log.mkdir()
    (log / f"{0:020d}.json").write_text("{}\n")
    stop = threading.Event()

    def commit_forever() -> None:
        version = 0
        while not stop.is_set():
            version = version % 50 + 1  # a log of at most 51 commits, rewritten in turn
            temporary = log / f"{version:020d}.json#1"
            temporary.write_text("{}\n")
            os.replace(temporary, log / f"{version:020d}.json")

    writer = threading.Thread(target=commit_forever)
    writer.start()
    storage = LocalStorage(str(tmp_path))
    try:
        for _ in range(3000):
            names = {entry.name for entry in storage.list_log()}
            assert f"{0:020d}.json" in names
    finally:
        stop.set()
        writer.join()
