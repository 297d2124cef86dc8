"""The Definitions load, validate, and serve the Dagster UI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import dagster as dg

from cdf_platform.definitions import defs

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DAGSTER = str(Path(sys.executable).parent / "dagster")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_definitions_load_without_starting_spark() -> None:
    from cdf_platform.resources.spark import SparkResource

    assert isinstance(defs, dg.Definitions)
    spark = (defs.resources or {})["spark"]
    assert isinstance(spark, SparkResource)
    assert not spark.started
    keys = defs.resolve_asset_graph().get_all_asset_keys()
    assert dg.AssetKey(["bronze", "orders"]) in keys
    assert dg.AssetKey(["bronze", "customers"]) in keys


def test_dagster_definitions_validate_passes(tmp_path: Path) -> None:
    completed = subprocess.run(
        [DAGSTER, "definitions", "validate", "-w", "workspace.yaml"],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "All code locations passed validation" in completed.stdout + completed.stderr


def test_dagster_dev_serves_the_ui_on_loopback(tmp_path: Path) -> None:
    port = _free_port()
    process = subprocess.Popen(
        [DAGSTER, "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(port)],
        cwd=PROJECT_ROOT,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        status = None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and status != 200:
            assert process.poll() is None, "dagster dev exited early"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
                    status = r.status
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        assert status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
            assert response.status == 200
            assert b"Dagster" in response.read()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
