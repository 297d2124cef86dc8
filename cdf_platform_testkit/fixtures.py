"""The fixtures the tests and the tests of the benchmarks share (a pytest plugin, registered by
the repository's `conftest.py`): one real SparkSession per test session, one lake folder per
test, the local S3 server, the JVM options and commit cache of the session; and the order in
which `pytest -n 2 --dist loadfile` hands out the test files, the `heavy` ones in lanes."""

from __future__ import annotations

import ast
import fcntl
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import SparkSession
from xdist.scheduler import LoadFileScheduling

from cdf_platform.deltalog.commit_cache import CACHE_ENV
from cdf_platform.orchestration.shared.spark_resource import SparkResource
from cdf_platform.services.local_s3 import LocalS3Server
from cdf_platform_testkit.azurite import ACCOUNT_HOST
from cdf_platform_testkit.class_archive import archive_path, made_in_background
from cdf_platform_testkit.environment import environment
from cdf_platform_testkit.jvm_options import LONG_LIVED, java_environment
from cdf_platform_testkit.receivers import HttpReceiver, SmtpReceiver
from cdf_platform_testkit.spark_conf import TEST_SPARK_CONF

if TYPE_CHECKING:
    from xdist.remote import Producer
    from xdist.scheduler.protocol import Scheduling

# The test files that start servers or Spark processes of their own (clusters, deployments, the
# browser story, killed runs) carry the marker `heavy` in their module-level `pytestmark`. Under
# `--dist loadfile` they are run in lanes (`HeavyFilesTogether`): one worker is left to the
# in-process files, and the heavy files are spread over the other workers, each lane one unit of
# work run one file after another. `make test` (`-n 2`) has one lane: a third process, for two
# lanes, was no faster on 2 cores (docs/testing.md); more processes on a larger machine get
# more lanes.
#
# xdist's public way to put files in one unit, `--dist loadgroup` with `xdist_group` markers,
# does not group under pytest 9.2: xdist 3.8 appends the group to `item._nodeid`
# (xdist/remote.py), which pytest 9.2's node ids (`Node.nodeid` is built from `Node._id`) no
# longer read, so every test would be a unit of its own (pytest-dev/pytest-xdist#1386).
HEAVY_MARK = "heavy"


def _minutes_first(item: pytest.Item) -> float:
    long = item.get_closest_marker("long")
    return -float(long.kwargs.get("minutes", 1)) if long is not None else 0.0


def _test_file(nodeid: str) -> str:
    """The test file a node id names (relative to the rootdir)."""
    return nodeid.split("::", 1)[0]


def _module_marks(path: Path) -> ast.expr | None:
    """The value of the module-level `pytestmark` of the test file `path`, read from its source."""
    for statement in ast.parse(path.read_text()).body:
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        else:
            continue
        if any(isinstance(target, ast.Name) and target.id == "pytestmark" for target in targets):
            return value
    return None


def _is_mark(node: ast.AST, name: str) -> bool:
    """Whether `node` is `pytest.mark.<name>` (or `mark.<name>`)."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def _marks_file_heavy(path: Path) -> bool:
    """Whether the module-level `pytestmark` of the test file `path` holds `pytest.mark.heavy`."""
    marks = _module_marks(path)
    return marks is not None and any(_is_mark(node, HEAVY_MARK) for node in ast.walk(marks))


def _file_minutes(path: Path) -> float:
    """The minutes of the module-level `long(minutes=...)` mark of the test file `path`; 1 for
    a `long` mark without them (as `_minutes_first` counts it) or a file without one."""
    marks = _module_marks(path)
    for node in ast.walk(marks) if marks is not None else ():
        if isinstance(node, ast.Call) and _is_mark(node.func, "long"):
            for keyword in node.keywords:
                if keyword.arg == "minutes" and isinstance(keyword.value, ast.Constant):
                    return float(keyword.value.value)
    return 1.0


def heavy_files(root: Path, paths: Iterable[str]) -> set[str]:
    """Those of the test files `paths` (relative to `root`) marked `heavy` in their module-level
    `pytestmark`, read from their source: xdist's scheduler sees node ids, not markers."""
    return {path for path in paths if path.endswith(".py") and _marks_file_heavy(root / path)}


def heavy_lanes(root: Path, heavy: Iterable[str], lanes: int) -> dict[str, str]:
    """The unit of work (`heavy files 1` .. `heavy files <lanes>`) of each heavy test file: the
    longest first (`long(minutes=...)`, read from the source), each onto the lane with the
    fewest minutes so far (the first of those on a tie)."""
    totals = [0.0] * max(1, lanes)
    units: dict[str, str] = {}
    for minutes, path in sorted((-_file_minutes(root / path), path) for path in heavy):
        lane = totals.index(min(totals))
        totals[lane] -= minutes
        units[path] = f"heavy files {lane + 1}"
    return units


def _check_heavy_marks(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Raise when a test is marked `heavy` other than by its file's module-level `pytestmark`:
    `HeavyFilesTogether` would not see its file as heavy."""
    marks: dict[str, list[bool]] = {}
    for item in items:
        marked = item.get_closest_marker(HEAVY_MARK) is not None
        marks.setdefault(_test_file(item.nodeid), []).append(marked)
    heavy = {path for path, marked in marks.items() if any(marked)}
    read = heavy_files(config.rootpath, heavy)
    wrong = sorted(path for path in heavy if path not in read or not all(marks[path]))
    if wrong:
        raise pytest.UsageError(
            f"mark a heavy test file as a whole, in its module-level pytestmark: {wrong}"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Put the tests of `long` files first, longest first (`long(minutes=...)`), so that
    `pytest -n 2 --dist loadfile --no-loadscope-reorder` hands them out first instead of one
    worker ending the run with one of them (xdist's default order, the files with the most
    tests first, would undo this); check that `heavy` marks whole files; skip `slow` tests
    (the long randomized history, the latency benchmark's smoke run) when no marker expression
    was given (the default CI run)."""
    items.sort(key=_minutes_first)  # stable: the others keep their order
    _check_heavy_marks(config, items)
    if config.getoption("markexpr"):
        return
    skip = pytest.mark.skip(reason="slow: run with `pytest -m slow`")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


class HeavyFilesTogether(LoadFileScheduling):
    """xdist's whole-file scheduling, with the test files marked `heavy` in lanes of their own:
    one worker is left to the in-process files, and the heavy files are spread over the others
    (`heavy_lanes`; one lane, all of them, under `-n 2`), each lane one unit of work."""

    _units: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        path = _test_file(nodeid)
        return self._heavy_units().get(path, path)

    def _heavy_units(self) -> dict[str, str]:
        """The unit of each heavy file among those collected, read once: xdist splits the work
        into units when every worker's collection is in (`schedule`)."""
        if self._units is None:
            assert self.collection is not None, "split before the collection was complete"
            collected = {_test_file(nodeid) for nodeid in self.collection}
            heavy = heavy_files(self.config.rootpath, collected)
            self._units = heavy_lanes(self.config.rootpath, heavy, len(self.nodes) - 1)
        return self._units


def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> Scheduling | None:
    """`HeavyFilesTogether` for `--dist loadfile` (`make test`); xdist's own otherwise."""
    if config.getvalue("dist") != "loadfile":
        return None
    return HeavyFilesTogether(config, log)


@pytest.fixture(scope="session", autouse=True)
def jvm_options() -> Iterator[None]:
    """The JVM options of every Java process the tests start (`jvm_options`), in the
    environment the test session's own Spark and every subprocess inherit: with the class-data
    archive of Spark's classes (`class_archive`), made in the background by the first test
    process that finds it missing."""
    archive = archive_path()
    with made_in_background(archive), environment(java_environment(archive)):
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
def shuffle_partitions_kept(spark: SparkSession) -> Iterator[None]:
    """The shared session keeps its shuffle partitions after a test that runs the CLI in this
    process: a run sets its settings' own (`spark.sql.shuffle.partitions`) on the session."""
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    assert partitions is not None
    yield
    spark.conf.set("spark.sql.shuffle.partitions", partitions)


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
