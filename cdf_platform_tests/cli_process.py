"""`cdf-platform` in a subprocess, configured by the environment as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CLI = str(Path(sys.executable).parent / "cdf-platform")


def run_cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`cdf-platform <args>` with this process's environment plus `env`, in `cwd` (default:
    this process's working directory); never raises on a non-zero exit (the tests check it)."""
    return subprocess.run(
        [CLI, *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def python_json(code: str, *args: str, env: dict[str, str], timeout: float = 300) -> dict[str, Any]:
    """Run `code` (with `args` as its argv) in a fresh interpreter with exactly `env`; the JSON
    object its last line of output prints. Fails the test, with its stderr, on a non-zero exit."""
    completed = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    parsed = json.loads(completed.stdout.strip().splitlines()[-1])
    assert isinstance(parsed, dict), parsed
    return parsed
