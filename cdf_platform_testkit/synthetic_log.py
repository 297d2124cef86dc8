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
    model = json.loads(Path(commit_file(path, 1)).read_text().splitlines()[0])["commitInfo"]
    os.makedirs(os.path.join(path, "_change_data"), exist_ok=True)
    previous_ms = os.stat(commit_file(path, first - 1)).st_mtime_ns // 1_000_000
    for version in range(first, last + 1):
        # Delta takes a commit's timestamp from its file's mtime: keep them strictly increasing,
        # as real commits are (equal ones make delta-spark warn once per commit).
        now_ms = previous_ms = max(int(time.time() * 1000), previous_ms + 1)
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
        commit = commit_file(path, version)
        Path(commit).write_text(text)
        os.utime(commit, ns=(now_ms * 1_000_000, now_ms * 1_000_000))
