"""Synthetic Delta commits, modelled on delta-spark's own, for timing tests on long logs."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def commit_file(table: str, version: int) -> str:
    """Path of the commit file of `version`."""
    return os.path.join(table, "_delta_log", f"{version:020d}.json")


def write_synthetic_commits(path: str, first: int, last: int) -> None:
    """Commits first..last modelled on delta-spark's own: an add per commit, every third one an
    UPDATE-like commit with a cdc file; every referenced file exists (empty)."""
    log_dir = os.path.join(path, "_delta_log")
    model = json.loads(Path(commit_file(path, 1)).read_text().splitlines()[0])["commitInfo"]
    os.makedirs(os.path.join(path, "_change_data"), exist_ok=True)
    for version in range(first, last + 1):
        now_ms = int(time.time() * 1000)
        data = f"part-00000-{version:08d}-c000.snappy.parquet"
        actions: list[dict[str, object]] = [
            {"commitInfo": {**model, "timestamp": now_ms, "readVersion": version - 1}},
            {
                "add": {
                    "path": data,
                    "partitionValues": {},
                    "size": 1,
                    "modificationTime": now_ms,
                    "dataChange": True,
                }
            },
        ]
        Path(path, data).touch()
        if version % 3 == 0:
            cdc = f"_change_data/cdc-00000-{version:08d}.c000.snappy.parquet"
            actions.append(
                {"cdc": {"path": cdc, "partitionValues": {}, "size": 1, "dataChange": False}}
            )
            Path(path, cdc).touch()
        text = "\n".join(json.dumps(action) for action in actions) + "\n"
        Path(log_dir, f"{version:020d}.json").write_text(text)
