"""What Spark needs to read and write a lake on an object store: connector jars and their conf.

Only the stores a session's locations name are configured: a local lake loads nothing extra.

- S3 (`s3://`, `s3a://`, `s3n://`): Hadoop's S3A connector, `hadoop-aws` at the Hadoop version
  pyspark ships (3.5.0 for pyspark 4.2.0), resolved from Maven Central by `spark.jars.packages`
  like the Delta jar. hadoop-aws depends on the AWS SDK v2 `bundle` jar (686 MB); it is excluded
  and replaced by the two SDK modules S3A uses (`s3`, `s3-transfer-manager`, ~19 MB with their
  dependencies) at the SDK version hadoop-aws was built with. `s3://` is mapped to S3A so one
  URI names the same objects for Spark, `deltalake` and the JVM-free reader. The endpoint,
  region and path-style access come from the environment variables `deltalake` and `obstore`
  read (`AWS_ENDPOINT_URL`, `AWS_REGION`, ...); environment credentials are never put in the
  Spark conf: Spark copies `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`
  into its Hadoop conf itself, and S3A's default provider chain reads the same variables (then
  instance roles).
- Azure (`abfss://`, `abfs://`) and GCS (`gs://`): the connectors' coordinates are added
  (`hadoop-azure`, Google's `gcs-connector`); their environment-wide credentials are the
  connectors' own Spark conf (`spark.hadoop.fs.azure.account...`, `spark.hadoop.fs.gs...`),
  set through the Spark resource's `spark_config`. The Azure connector is tested against
  Azurite; the GCS one is not, and as configured does not start on pyspark 4.2's Hadoop 3.5.0,
  which maps `gs://` to its own connector (docs/storage.md has what was measured).

The storage options configured per location prefix (`cdf_platform.core.storage`) are
the same for Spark as for the JVM-free readers, mapped to the connectors' scoped keys
(`storage_hadoop_conf`), which override the environment-wide ones for their bucket or account
only, so lakes on different endpoints and credentials share one session:

- S3: S3A's per-bucket keys `fs.s3a.bucket.<bucket>.*`: `endpoint`, `endpoint.region`,
  `access.key`, `secret.key`, `session.token` (with the matching `aws.credentials.provider`,
  so the configured keys are the ones used), `path.style.access` (path style unless
  `virtual_hosted_style_request`), `connection.ssl.enabled` (from the endpoint's scheme), and
  the anonymous provider for `skip_signature`. `allow_http` has no S3A key: S3A follows the
  endpoint's scheme.
- ADLS (`abfs://`/`abfss://` prefixes): ABFS's per-account keys: `account_key`
  (`fs.azure.account.key.<host>`), `sas_token` (the fixed SAS token provider) and
  `client_id`/`client_secret`/`tenant_id` (OAuth client credentials). Not mapped: `endpoint`,
  `use_emulator` and `allow_http` (ABFS addresses an account by its host name), and `az://`
  prefixes (Spark reads ADLS through `abfss://` only).
- GCS: not mapped; the gcs-connector has no per-bucket credentials (use `spark_config`).

Options are per bucket (S3) or per account (ADLS) for Spark: two prefixes of one bucket that
give it different settings are refused (`InvalidStorageConfig`).

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

from cdf_platform.core.cloud_options import StoreKind
from cdf_platform.core.errors import InvalidStorageConfig
from cdf_platform.core.storage import StorageConfig, StorageEntry

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


S3A_CREDENTIALS = {
    "static": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    "temporary": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider",
    "anonymous": "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider",
}
ABFS_FIXED_SAS = "org.apache.hadoop.fs.azurebfs.sas.FixedSASTokenProvider"
ABFS_CLIENT_CREDENTIALS = "org.apache.hadoop.fs.azurebfs.oauth2.ClientCredsTokenProvider"


def _s3a_bucket_conf(entry: StorageEntry) -> dict[str, str]:
    """S3A's per-bucket keys for one S3 prefix's options."""
    values = entry.values()
    scoped = f"fs.s3a.bucket.{urlparse(entry.prefix).netloc}"
    conf: dict[str, str] = {}
    endpoint = values.get("endpoint")
    if isinstance(endpoint, str):
        conf[f"{scoped}.endpoint"] = endpoint
        secure = not endpoint.startswith("http://")
        conf[f"{scoped}.connection.ssl.enabled"] = str(secure).lower()
    virtual = values.get("virtual_hosted_style_request")
    if virtual is not None:
        conf[f"{scoped}.path.style.access"] = str(not virtual).lower()
    elif endpoint:  # as obstore and deltalake address a custom endpoint
        conf[f"{scoped}.path.style.access"] = "true"
    for option, key in (
        ("region", "endpoint.region"),
        ("access_key_id", "access.key"),
        ("secret_access_key", "secret.key"),
        ("session_token", "session.token"),
    ):
        if option in values:
            conf[f"{scoped}.{key}"] = str(values[option])
    # The configured keys, not the environment's that come first in S3A's default chain.
    if "session_token" in values:
        conf[f"{scoped}.aws.credentials.provider"] = S3A_CREDENTIALS["temporary"]
    elif "access_key_id" in values:
        conf[f"{scoped}.aws.credentials.provider"] = S3A_CREDENTIALS["static"]
    elif values.get("skip_signature"):
        conf[f"{scoped}.aws.credentials.provider"] = S3A_CREDENTIALS["anonymous"]
    return conf


def _abfs_account_conf(entry: StorageEntry) -> dict[str, str]:
    """ABFS's per-account keys for one `abfs://`/`abfss://` prefix's options."""
    parsed = urlparse(entry.prefix)
    if parsed.scheme.lower() not in AZURE_SCHEMES or "@" not in parsed.netloc:
        return {}  # az:// (Spark does not read it), or no account host to scope by
    host = parsed.netloc.split("@", 1)[1]
    values = entry.values()
    conf: dict[str, str] = {}
    if "account_key" in values:
        conf[f"fs.azure.account.auth.type.{host}"] = "SharedKey"
        conf[f"fs.azure.account.key.{host}"] = str(values["account_key"])
    elif "sas_token" in values:
        conf[f"fs.azure.account.auth.type.{host}"] = "SAS"
        conf[f"fs.azure.sas.token.provider.type.{host}"] = ABFS_FIXED_SAS
        conf[f"fs.azure.sas.fixed.token.{host}"] = str(values["sas_token"])
    elif "client_id" in values:
        conf[f"fs.azure.account.auth.type.{host}"] = "OAuth"
        conf[f"fs.azure.account.oauth.provider.type.{host}"] = ABFS_CLIENT_CREDENTIALS
        conf[f"fs.azure.account.oauth2.client.id.{host}"] = str(values["client_id"])
        if "client_secret" in values:
            conf[f"fs.azure.account.oauth2.client.secret.{host}"] = str(values["client_secret"])
        if "tenant_id" in values:
            conf[f"fs.azure.account.oauth2.client.endpoint.{host}"] = (
                f"https://login.microsoftonline.com/{values['tenant_id']}/oauth2/token"
            )
    return conf


def storage_hadoop_conf(storage: StorageConfig) -> dict[str, str]:
    """The Hadoop conf (keys without `spark.hadoop.`) that gives Spark's connectors the
    configured options of every prefix (resolved), scoped to its bucket or account.

    Raises:
        InvalidStorageConfig: two prefixes give one bucket's (account's) key different values.
    """
    conf: dict[str, str] = {}
    owners: dict[str, str] = {}
    for entry in storage.entries:
        if entry.store is StoreKind.S3:
            scoped = _s3a_bucket_conf(entry)
        elif entry.store is StoreKind.AZURE:
            scoped = _abfs_account_conf(entry)
        else:
            scoped = {}
        for key, value in scoped.items():
            if key in conf and conf[key] != value:
                raise InvalidStorageConfig(
                    f"storage prefixes {owners[key]} and {entry.prefix} give Spark's {key} "
                    "different values; Spark's connectors take options per bucket (S3) or "
                    "account (ADLS)",
                    table=entry.prefix,
                    action="give the prefixes of one bucket or account the same options, or "
                    "configure the bucket itself once",
                )
            conf[key], owners[key] = value, entry.prefix
    return conf


def object_store_conf(
    schemes: Iterable[str], env: Mapping[str, str], storage: StorageConfig | None = None
) -> ObjectStoreConf:
    """The packages and conf Spark needs for `schemes`, configured from `env`, with the
    bucket- and account-scoped options of `storage` (resolved) on top.

    Args:
        schemes: Object-store URI schemes (see `object_store_schemes`).
        env: The environment to read endpoint and region from (normally `os.environ`).
        storage: The storage options configured per prefix (default: none).

    Raises:
        InvalidStorageConfig: see `storage_hadoop_conf`.
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
    if storage is not None:
        scoped = storage_hadoop_conf(storage)
        conf.update({f"spark.hadoop.{key}": value for key, value in scoped.items()})
    return ObjectStoreConf(tuple(packages), tuple(excludes), conf)
