"""The fixtures the tests and the tests of the benchmarks share (a pytest plugin, registered by
the repository's `conftest.py`): one real SparkSession per test session, one lake folder per
test, the local S3 server, the JVM options and commit cache of the session."""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import SparkSession
from xdist.scheduler import LoadFileScheduling

from cdf_platform.deltalog.commit_cache import CACHE_ENV
from cdf_platform.orchestration.shared.resources import SparkResource
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform_testkit.azurite import ACCOUNT_HOST
from cdf_platform_testkit.environment import environment
from cdf_platform_testkit.jvm_options import ENVIRONMENT, LONG_LIVED
from cdf_platform_testkit.receivers import HttpReceiver, SmtpReceiver
from cdf_platform_testkit.spark_conf import TEST_SPARK_CONF

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler.protocol import Scheduling


def _minutes_first(item: pytest.Item) -> float:
    long = item.get_closest_marker("long")
    return -float(long.kwargs.get("minutes", 1)) if long is not None else 0.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests of `long` files first, longest first (`long(minutes=...)`), so that
    `pytest -n 2 --dist loadfile --no-loadscope-reorder` hands them out first instead of one
    worker ending the run with one of them (xdist's default order, the files with the most
    tests first, would undo this); skip
    `slow` tests (the long randomized history, the latency benchmark's smoke run) when no
    marker expression was given (the default CI run)."""
    items.sort(key=_minutes_first)  # stable: the others keep their order
    if config.getoption("markexpr"):
        return
    skip = pytest.mark.skip(reason="slow: run with `pytest -m slow`")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


# The test files that start servers or Spark processes of their own (clusters, deployments,
# killed runs): under `--dist loadfile` they are one unit of work, so one worker runs them one
# after another while the other runs in-process tests. Two at once on 2 cores took up to half
# as long again (the deployment story 321 s instead of 248, the killed runs' fixture 97 s
# instead of 64).
HEAVY_FILES = frozenset(
    {
        "cdf_platform_tests/clusters/test_modes.py",
        "cdf_platform_tests/clusters/test_engine.py",
        "cdf_platform_tests/test_ui_browser.py",
        "cdf_platform_tests/system/test_deployment.py",
        "cdf_platform_tests/system/test_supervised.py",
        "cdf_platform_tests/faults/test_fault_points.py",
    }
)


class HeavyFilesTogether(LoadFileScheduling):
    """xdist's whole-file scheduling, with the `HEAVY_FILES` as one file."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return "heavy files" if path in HEAVY_FILES else path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """`HeavyFilesTogether` for `--dist loadfile` (`make test`); xdist's own otherwise."""
    if config.getvalue("dist") != "loadfile":
        return None
    gone = sorted(f for f in HEAVY_FILES if not (config.rootpath / f).is_file())
    if gone:
        raise pytest.UsageError(f"HEAVY_FILES names files that do not exist: {gone}")
    return HeavyFilesTogether(config, log)


@pytest.fixture(scope="session", autouse=True)
def jvm_options() -> Iterator[None]:
    """The JVM options of every Java process the tests start (`jvm_options`), in the
    environment the test session's own Spark and every subprocess inherit."""
    with environment(ENVIRONMENT):
        yield


@pytest.fixture(scope="session", autouse=True)
def commit_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The object-store commit cache of this test session (and of the CLIs it starts), in a
    temp folder instead of the user's ~/.cache."""
    folder = tmp_path_factory.mktemp("commit-cache")
    saved = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    yield folder
    if saved is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = saved


@pytest.fixture(scope="session")
def s3_server() -> Iterator[LocalS3Server]:
    """A real S3 server (moto) on a free loopback port for the whole test session; the
    environment points deltalake, obstore and Spark's S3A at it (as a user's AWS_* would)."""
    with LocalS3Server(bucket="cdf-tests") as server:
        saved = {name: os.environ.get(name) for name in server.env()}
        os.environ.update(server.env())
        yield server
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def s3_lake(s3_server: LocalS3Server) -> str:
    """A fresh lake root on the S3 server for one test (`s3://`, as users write it)."""
    return f"s3://{s3_server.bucket}/{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def spark_resource(
    tmp_path_factory: pytest.TempPathFactory, s3_server: LocalS3Server
) -> SparkResource:
    """The Spark resource the tests share; its session is the one `spark` returns. It can
    reach the test S3 server, and has the ABFS connector for Azurite (configured when a test
    asks for `spark_on_azurite`), so object-store tests share it too."""
    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    return SparkResource(
        master="local[2]",
        app_name="cdf_platform_tests",
        shuffle_partitions=2,
        driver_memory="2g",
        storage_locations=[f"s3://{s3_server.bucket}", f"abfs://lake@{ACCOUNT_HOST}"],
        spark_config={
            **TEST_SPARK_CONF,
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.driver.extraJavaOptions": LONG_LIVED,
        },
    )


@pytest.fixture(scope="session")
def spark(
    spark_resource: SparkResource, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkSession]:
    """A real SparkSession with Delta configured, started once for the whole test session.

    Under `pytest -n` each worker starts its own, one after another (a lock file in the run's
    shared temp folder): the first start resolves the packages from Maven Central into Ivy's
    cache, which two concurrent resolutions could both write."""
    with (tmp_path_factory.getbasetemp().parent / "spark-start.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        session = spark_resource.spark_session
        fcntl.flock(lock, fcntl.LOCK_UN)
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A fresh lake folder for one test."""
    root = tmp_path / "lake"
    root.mkdir()
    return root


@pytest.fixture(scope="module")
def alert_receivers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[HttpReceiver, SmtpReceiver]]:
    """Alert receivers for a test file: HTTP (a webhook, Slack's Web API) and SMTP, each a
    process on a free loopback port (`cdf_platform_testkit.receivers`)."""
    folder = tmp_path_factory.mktemp("receivers")
    with HttpReceiver(folder) as http, SmtpReceiver(folder) as smtp:
        yield http, smtp
