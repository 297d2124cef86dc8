"""`cdf-platform` in a subprocess, configured by the environment as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
