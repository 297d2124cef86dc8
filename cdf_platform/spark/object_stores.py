"""What Spark needs to read and write a lake on an object store: connector jars and their conf.

Only the stores a session's locations name are configured: a local lake loads nothing extra.

- S3 (`s3://`, `s3a://`, `s3n://`): Hadoop's S3A connector, `hadoop-aws` at the Hadoop version
  pyspark ships (3.5.0 for pyspark 4.2.0), resolved from Maven Central by `spark.jars.packages`
  like the Delta jar. hadoop-aws depends on the AWS SDK v2 `bundle` jar (686 MB); it is excluded
  and replaced by the two SDK modules S3A uses (`s3`, `s3-transfer-manager`, ~19 MB with their
  dependencies) at the SDK version hadoop-aws was built with. `s3://` is mapped to S3A so one
  URI names the same objects for Spark, `deltalake` and the JVM-free reader. The endpoint,
  region and path-style access come from the environment variables `deltalake` and `obstore`
  read (`AWS_ENDPOINT_URL`, `AWS_REGION`, ...). Credentials are never put in the Spark conf:
  Spark copies `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN` from the
  environment into its Hadoop conf itself, and S3A's default provider chain reads the same
  variables (then instance roles).
- Azure (`abfss://`, `abfs://`) and GCS (`gs://`): the connectors' coordinates are added
  (`hadoop-azure`, Google's `gcs-connector`); their credentials are the connectors' own Spark
  conf (`spark.hadoop.fs.azure.account...`, `spark.hadoop.fs.gs...`), set through the Spark
  resource's `spark_config`. The Azure connector is tested against Azurite; the GCS one is not,
  and as configured does not start on pyspark 4.2's Hadoop 3.5.0, which maps `gs://` to its own
  connector (README, "Object-store lakes", has what was measured).

Example:
    >>> conf = object_store_conf(object_store_schemes(["s3://bucket/lake"]), {})
    >>> conf.packages[0]
    'org.apache.hadoop:hadoop-aws:3.5.0'
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlparse

S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
AZURE_SCHEMES = frozenset({"abfs", "abfss"})
GCS_SCHEMES = frozenset({"gs"})
# The AWS SDK v2 version hadoop-aws 3.5.0 is built with (its POM's aws-java-sdk-v2.version):
# the modules below must match it.
AWS_SDK_VERSION = "2.35.4"
AWS_SDK_BUNDLE = "software.amazon.awssdk:bundle"
AWS_SDK_MODULES = ("s3", "s3-transfer-manager")
GCS_CONNECTOR = "com.google.cloud.bigdataoss:gcs-connector:hadoop3-2.2.26"
# Used when pyspark's own Hadoop jar cannot be found (pyspark 4.2.0 ships 3.5.0).
FALLBACK_HADOOP_VERSION = "3.5.0"


@dataclass(frozen=True)
class ObjectStoreConf:
    """Spark packages, exclusions and conf for the object stores a session uses.

    Attributes:
        packages: Maven coordinates to add to `spark.jars.packages`.
        excludes: `group:artifact` pairs for `spark.jars.excludes`.
        conf: Further Spark conf (connector settings).
    """

    packages: tuple[str, ...] = ()
    excludes: tuple[str, ...] = ()
    conf: dict[str, str] = field(default_factory=dict)


def object_store_schemes(locations: Iterable[str]) -> frozenset[str]:
    """The object-store URI schemes among `locations` (local paths and `file:` give none)."""
    schemes = {urlparse(location).scheme.lower() for location in locations}
    return frozenset(schemes & (S3_SCHEMES | AZURE_SCHEMES | GCS_SCHEMES))


def hadoop_version() -> str:
    """The Hadoop version Spark runs on, read from its `hadoop-client-api-<v>.jar`.

    pyspark's own `jars/` is looked in first, then `$SPARK_HOME/jars` (a Spark distribution's
    pyspark has no `jars/`), else `FALLBACK_HADOOP_VERSION`. pyspark is located, not imported.
    """
    folders = []
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin:
        folders.append(os.path.join(os.path.dirname(spec.origin), "jars"))
    if spark_home := os.environ.get("SPARK_HOME"):
        folders.append(os.path.join(spark_home, "jars"))
    for folder in folders:
        for jar in sorted(glob.glob(os.path.join(folder, "hadoop-client-api-*.jar"))):
            if match := re.search(r"hadoop-client-api-([\d.]+)\.jar$", jar):
                return match.group(1)
    return FALLBACK_HADOOP_VERSION


def _s3a_conf(env: Mapping[str, str]) -> dict[str, str]:
    """S3A settings from the environment deltalake and obstore read, and the s3:// mapping."""
    # Hadoop 3 has no `s3://` or `s3n://` filesystem of its own: both become S3A, whose
    # `fs.s3a.*` settings then apply whatever the scheme (Delta's S3 log store covers all three).
    conf: dict[str, str] = {}
    for scheme in sorted(S3_SCHEMES - {"s3a"}):
        conf[f"spark.hadoop.fs.{scheme}.impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
        conf[f"spark.hadoop.fs.AbstractFileSystem.{scheme}.impl"] = "org.apache.hadoop.fs.s3a.S3A"
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    endpoint = endpoint or env.get("AWS_ENDPOINT")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(
            not endpoint.startswith("http://")
        ).lower()
    # S3-compatible servers (MinIO, moto, Ceph) are addressed by path, as obstore does for a
    # custom endpoint unless virtual-hosted style is asked for; an explicit choice always holds.
    virtual = env.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "").strip().lower()
    if virtual in ("true", "false"):
        conf["spark.hadoop.fs.s3a.path.style.access"] = str(virtual == "false").lower()
    elif endpoint:
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    return conf


def object_store_conf(schemes: Iterable[str], env: Mapping[str, str]) -> ObjectStoreConf:
    """The packages and conf Spark needs for `schemes`, configured from `env`.

    Args:
        schemes: Object-store URI schemes (see `object_store_schemes`).
        env: The environment to read endpoint and region from (normally `os.environ`).
    """
    wanted = set(schemes)
    packages: list[str] = []
    excludes: list[str] = []
    conf: dict[str, str] = {}
    hadoop = hadoop_version()
    if wanted & S3_SCHEMES:
        packages.append(f"org.apache.hadoop:hadoop-aws:{hadoop}")
        packages += [f"software.amazon.awssdk:{m}:{AWS_SDK_VERSION}" for m in AWS_SDK_MODULES]
        excludes.append(AWS_SDK_BUNDLE)
        conf.update(_s3a_conf(env))
    if wanted & AZURE_SCHEMES:
        packages.append(f"org.apache.hadoop:hadoop-azure:{hadoop}")
    if wanted & GCS_SCHEMES:
        packages.append(GCS_CONNECTOR)
    return ObjectStoreConf(tuple(packages), tuple(excludes), conf)
