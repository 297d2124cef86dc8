"""The warm run worker's preload: what a forked run would import again is imported once, by a
process that stays single-threaded (a fork copies only the forking thread, so any other
thread's held lock would be held for good in every run)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from cdf_platform_tests.cli_process import python_json

DEPLOY_INSTANCE = Path(__file__).resolve().parents[3] / "deploy" / "dagster.yaml"

_PRELOAD = textwrap.dedent(
    """
    import json, sys
    from cdf_platform.orchestration.launch.run_worker import os_threads, preload
    modules = preload()
    print(json.dumps({
        "threads": os_threads(),
        "modules": list(modules),
        "loaded": sorted(name for name in ("sqlalchemy", "alembic", "pyarrow", "deltalake")
                         if name in sys.modules),
    }))
    """
)


def _preload_in_fresh_interpreter(home: Path) -> dict[str, object]:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "CDF_DAGSTER_PG_HOST": "127.0.0.1",
        "CDF_DAGSTER_PG_PORT": "5432",
        "CDF_DAGSTER_PG_USER": "dagster",
        "CDF_DAGSTER_PG_PASSWORD": "unused",
        "CDF_DAGSTER_PG_DB": "dagster",
        "CDF_RUN_WORKER": "127.0.0.1:4010",
    }
    for name in ("JE_ARROW_MALLOC_CONF", "_RJEM_MALLOC_CONF", "OPENBLAS_NUM_THREADS"):
        env.pop(name, None)
    return python_json(_PRELOAD, env=env, timeout=120)


def test_preload_imports_the_deployments_storage_and_stays_single_threaded(
    tmp_path: Path,
) -> None:
    pytest.importorskip("dagster_postgres")
    (tmp_path / "dagster.yaml").write_text(DEPLOY_INSTANCE.read_text())

    result = _preload_in_fresh_interpreter(tmp_path)

    assert result["threads"] == 1
    modules = result["modules"]
    assert isinstance(modules, list)
    assert any(name.startswith("dagster_postgres") for name in modules), modules
    assert "cdf_platform.orchestration.run_launcher" in modules
    assert result["loaded"] == ["alembic", "deltalake", "pyarrow", "sqlalchemy"]


def test_preload_without_an_instance_imports_the_run_modules_only(tmp_path: Path) -> None:
    result = _preload_in_fresh_interpreter(tmp_path / "no-such-home")

    assert result["threads"] == 1
    assert "deltalake" in result["modules"]
