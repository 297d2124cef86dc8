"""The warm run worker's preload: what a forked run would import again is imported once, by a
process that stays single-threaded (a fork copies only the forking thread, so any other
thread's held lock would be held for good in every run)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from cdf_platform.orchestration.launch.run_worker import QUIET_LIBRARIES, quiet_environment
from cdf_platform_tests.cli_process import python_json

DEPLOY_INSTANCE = Path(__file__).resolve().parents[3] / "deploy" / "dagster.yaml"

_PRELOAD = textwrap.dedent(
    """
    import json, sys
    import cdf_platform.definitions as definitions
    from cdf_platform.orchestration.launch.run_worker import os_threads, preload, start_quiet
    start_quiet()
    modules = preload(definitions.warm_definitions)
    threads = os_threads()
    # A forked run loads the definitions the worker built: nothing is built again.
    definitions.build_defs = None
    reused = isinstance(definitions.defs(), definitions.dg.Definitions)
    before = set(sys.modules)
    import pyarrow as pa
    # What a run merged without Spark does with pyarrow (jvm_free.latest_merge.latest_changes).
    pa.array([1, None], pa.int64())
    pa.array([True], pa.bool_())
    print(json.dumps({
        "imported_by_a_run": sorted(set(sys.modules) - before),
        "definitions_reused": reused,
        "threads": threads,
        "modules": list(modules),
        "loaded": sorted(name for name in ("sqlalchemy", "alembic", "pyarrow", "deltalake")
                         if name in sys.modules),
    }))
    """
)

# The same imports in a process left as it started: the error `preload` raises, if any.
_PRELOAD_WITHOUT_START_QUIET = textwrap.dedent(
    """
    import json
    from cdf_platform.orchestration.launch.run_worker import preload
    try:
        preload()
    except Exception as error:
        print(json.dumps({"error": str(error)}))
    else:
        print(json.dumps({}))
    """
)


def _environment(home: Path) -> dict[str, str]:
    """This process's environment for a deployment at `home`, without `QUIET_LIBRARIES`."""
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
    for name in QUIET_LIBRARIES:
        env.pop(name, None)
    return env


def _preload_in_fresh_interpreter(home: Path) -> dict[str, object]:
    return python_json(_PRELOAD, env=_environment(home), timeout=120)


def test_preload_imports_the_deployments_storage_and_stays_single_threaded(
    tmp_path: Path,
) -> None:
    pytest.importorskip("dagster_postgres")
    (tmp_path / "dagster.yaml").write_text(DEPLOY_INSTANCE.read_text())

    result = _preload_in_fresh_interpreter(tmp_path)

    assert result["threads"] == 1
    modules = result["modules"]
    assert isinstance(modules, list)
    assert "cdf_platform.orchestration.instance_storage" in modules  # dagster-postgres beneath
    assert "cdf_platform.orchestration.run_launcher" in modules
    assert result["loaded"] == ["alembic", "deltalake", "pyarrow", "sqlalchemy"]
    # The definitions built in the worker (the repository's pipelines.yaml), no thread started.
    assert result["definitions_reused"] is True
    # pyarrow imports pandas at its first array built from Python values: in the worker, once.
    assert result["imported_by_a_run"] == []


def test_preload_without_an_instance_imports_the_run_modules_only(tmp_path: Path) -> None:
    result = _preload_in_fresh_interpreter(tmp_path / "no-such-home")

    assert result["threads"] == 1
    assert "deltalake" in result["modules"]


def test_preload_in_a_process_started_without_the_quiet_libraries_refuses_to_fork(
    tmp_path: Path,
) -> None:
    """Without `start_quiet` the libraries' threads start at import, and the worker says so."""
    result = python_json(
        _PRELOAD_WITHOUT_START_QUIET, env=_environment(tmp_path / "no-such-home"), timeout=120
    )

    assert "forking it is unsafe" in str(result.get("error")), result
    assert "start_quiet" in str(result["error"])


def test_the_quiet_environment_keeps_an_operators_values() -> None:
    assert quiet_environment({**QUIET_LIBRARIES, "PATH": "/bin"}) is None
    environ = quiet_environment({"OPENBLAS_NUM_THREADS": "4", "PATH": "/bin"})
    assert environ is not None
    assert environ["OPENBLAS_NUM_THREADS"] == "4"
    assert environ["PATH"] == "/bin"
    assert environ["JE_ARROW_MALLOC_CONF"] == QUIET_LIBRARIES["JE_ARROW_MALLOC_CONF"]
