"""The emulators of the ADLS and GCS tests, one of each per test session, started only when a
test asks for them; each points `deltalake` and `obstore` at itself through the environment
while it runs (as a user's AZURE_*/GOOGLE_* would), and restores the environment after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from cdf_platform_testkit.azurite import AZURITE_BLOB, Azurite
from cdf_platform_testkit.environment import environment
from cdf_platform_testkit.fake_gcs import PACKAGE, FakeGcsServer, fake_gcs_binary
from cdf_platform_testkit.objects import upload_folder
from cdf_platform_tests.adls_gcs.lake import EmulatedStore


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    """Azurite's Blob service with a container `lake`, for the whole test session."""
    if not AZURITE_BLOB.exists():
        pytest.skip(
            f"Azurite is not installed at {AZURITE_BLOB} (`make azurite`; `make test` runs it)"
        )
    with Azurite(tmp_path_factory.mktemp("azurite")) as server, environment(server.env()):
        yield server


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGcsServer]:
    """fake-gcs-server with a bucket `lake`, for the whole test session."""
    if fake_gcs_binary() is None:
        pytest.skip(f"{PACKAGE} is not installed (the dev extra pins it: `make setup`)")
    with FakeGcsServer(tmp_path_factory.mktemp("fake-gcs")) as server, environment(server.env()):
        yield server


@pytest.fixture(scope="session")
def spark_on_azurite(spark: SparkSession, azurite: Azurite) -> Iterator[Azurite]:
    """Azurite, reachable by the shared SparkSession's ABFS connector (`Azurite.hadoop_conf`
    set on its SparkContext's Hadoop configuration, which every session's reads and writes
    start from) while the test session lasts."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    settings = azurite.hadoop_conf()
    for key, value in settings.items():
        hadoop.set(key, value)
    yield azurite
    for key in settings:
        hadoop.unset(key)


def adls_store(azurite: Azurite) -> EmulatedStore:
    """Azurite as the tests use it: `az://` URIs, deltalake commits there."""
    return EmulatedStore("adls", f"az://{azurite.container}", True, upload_folder)


def gcs_store(fake_gcs: FakeGcsServer) -> EmulatedStore:
    """fake-gcs-server as the tests use it: `gs://` URIs, tables uploaded."""
    return EmulatedStore("gcs", f"gs://{fake_gcs.bucket}", False, fake_gcs.upload_folder)


@pytest.fixture(params=["adls", "gcs"])
def store(request: pytest.FixtureRequest) -> EmulatedStore:
    """Each emulated store in turn (its emulator started on first use)."""
    if request.param == "adls":
        return adls_store(request.getfixturevalue("azurite"))
    return gcs_store(request.getfixturevalue("fake_gcs"))
