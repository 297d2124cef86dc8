"""The options one object store takes: the stores a location can be on (by URI scheme), each
option's name, type and description, and the key it maps to for each reader.

- Option names are obstore's (the Python face of the Rust `object_store` crate that `deltalake`
  uses too). Each maps to that crate's key for `obstore` and for `deltalake`
  (`OPTION_KEYS`), and to the Hadoop connector's bucket- or account-scoped key for Spark
  (`cdf_platform.spark.runtime.object_stores`).
- A text value may be `{env: NAME}` (`EnvRef`): the variable is read when a lake is loaded, so
  no secret has to be written into a file.

Which prefix a location takes its options from is `cdf_platform.core.storage`.

Example:
    >>> store_of("s3a://lake-a/bronze/orders")
    (<StoreKind.S3: 'S3'>, 's3://lake-a/bronze/orders')
    >>> options_of(StoreKind.GCS)
    ['service_account_path', 'service_account_key', 'application_credentials']
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field


class StoreKind(StrEnum):
    """The object stores a location can be on."""

    S3 = "S3"
    AZURE = "Azure"
    GCS = "GCS"


# URI scheme -> its store and the scheme that names the same objects.
SCHEMES: dict[str, tuple[StoreKind, str]] = {
    "s3": (StoreKind.S3, "s3"),
    "s3a": (StoreKind.S3, "s3"),
    "s3n": (StoreKind.S3, "s3"),
    "abfs": (StoreKind.AZURE, "abfss"),
    "abfss": (StoreKind.AZURE, "abfss"),
    "az": (StoreKind.AZURE, "az"),
    "azure": (StoreKind.AZURE, "az"),
    "gs": (StoreKind.GCS, "gs"),
}


class EnvRef(BaseModel):
    """A value read from an environment variable when a lake is loaded:
    `{env: LAKE_A_SECRET}` in YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str = Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="The environment variable's name."
    )


# A text option: the value itself, or a reference to an environment variable.
Text = str | EnvRef


class StoreOptions(BaseModel):
    """The options of one storage prefix. Every option is optional; what is unset comes from
    the environment. Which store takes which option: `OPTION_KEYS`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: Text | None = Field(
        default=None,
        description="S3: the endpoint URL of an S3-compatible server (MinIO, Ceph), e.g. "
        "https://minio.internal:9000 (AWS_ENDPOINT_URL). Azure: the blob endpoint, e.g. "
        "Azurite's http://127.0.0.1:10000/devstoreaccount1 (JVM-free readers only).",
    )
    region: Text | None = Field(default=None, description="S3: the bucket's region (AWS_REGION).")
    allow_http: bool | None = Field(
        default=None,
        description="S3, Azure: allow a plain http:// endpoint (AWS_ALLOW_HTTP); Spark's S3A "
        "follows the endpoint's scheme.",
    )
    access_key_id: Text | None = Field(
        default=None, description="S3: the access key id (AWS_ACCESS_KEY_ID)."
    )
    secret_access_key: Text | None = Field(
        default=None, repr=False, description="S3: the secret access key (AWS_SECRET_ACCESS_KEY)."
    )
    session_token: Text | None = Field(
        default=None,
        repr=False,
        description="S3: the session token of temporary credentials (AWS_SESSION_TOKEN).",
    )
    virtual_hosted_style_request: bool | None = Field(
        default=None,
        description="S3: address the bucket as a host name (bucket.endpoint) rather than a "
        "path (endpoint/bucket). Default: path style with a custom endpoint, as S3-compatible "
        "servers want.",
    )
    skip_signature: bool | None = Field(
        default=None,
        description="S3: send unsigned requests (a public bucket); Spark uses S3A's anonymous "
        "credentials provider.",
    )
    account_name: Text | None = Field(
        default=None, description="Azure: the storage account (AZURE_STORAGE_ACCOUNT_NAME)."
    )
    account_key: Text | None = Field(
        default=None,
        repr=False,
        description="Azure: the account's shared key (AZURE_STORAGE_ACCOUNT_KEY).",
    )
    sas_token: Text | None = Field(
        default=None,
        repr=False,
        description="Azure: a shared access signature (AZURE_STORAGE_SAS_KEY).",
    )
    client_id: Text | None = Field(
        default=None,
        description="Azure: a service principal's client id (with client_secret, tenant_id).",
    )
    client_secret: Text | None = Field(
        default=None, repr=False, description="Azure: the service principal's client secret."
    )
    tenant_id: Text | None = Field(
        default=None, description="Azure: the service principal's tenant (directory) id."
    )
    use_emulator: bool | None = Field(
        default=None,
        description="Azure: talk to the Azurite emulator (JVM-free readers only).",
    )
    service_account_path: Text | None = Field(
        default=None,
        description="GCS: path of a service account JSON file (GOOGLE_SERVICE_ACCOUNT; "
        "JVM-free readers only).",
    )
    service_account_key: Text | None = Field(
        default=None,
        repr=False,
        description="GCS: a service account's JSON key itself (GOOGLE_SERVICE_ACCOUNT_KEY; "
        "JVM-free readers only).",
    )
    application_credentials: Text | None = Field(
        default=None,
        description="GCS: path of application default credentials "
        "(GOOGLE_APPLICATION_CREDENTIALS; JVM-free readers only).",
    )

    def values(self) -> dict[str, Text | bool]:
        """The options that are set, by name."""
        return {name: value for name, value in self if value is not None}


@dataclass(frozen=True)
class OptionKey:
    """How one option reaches the JVM-free readers.

    Attributes:
        deltalake: The `object_store` config key `deltalake` takes, per store that has the
            option (the stores listed here are the ones that take it).
        obstore: obstore's config key; None for an HTTP client option (`client_options`).
        secret: Never shown in messages.
    """

    deltalake: Mapping[StoreKind, str]
    obstore: str | None
    secret: bool = False


_S3, _AZURE, _GCS = StoreKind.S3, StoreKind.AZURE, StoreKind.GCS
OPTION_KEYS: dict[str, OptionKey] = {
    "endpoint": OptionKey({_S3: "aws_endpoint", _AZURE: "azure_storage_endpoint"}, "endpoint"),
    "region": OptionKey({_S3: "aws_region"}, "region"),
    "allow_http": OptionKey({_S3: "allow_http", _AZURE: "allow_http"}, None),
    "access_key_id": OptionKey({_S3: "aws_access_key_id"}, "access_key_id"),
    "secret_access_key": OptionKey(
        {_S3: "aws_secret_access_key"}, "secret_access_key", secret=True
    ),
    "session_token": OptionKey({_S3: "aws_session_token"}, "session_token", secret=True),
    "virtual_hosted_style_request": OptionKey(
        {_S3: "aws_virtual_hosted_style_request"}, "virtual_hosted_style_request"
    ),
    "skip_signature": OptionKey({_S3: "aws_skip_signature"}, "skip_signature"),
    "account_name": OptionKey({_AZURE: "azure_storage_account_name"}, "account_name"),
    "account_key": OptionKey({_AZURE: "azure_storage_account_key"}, "account_key", secret=True),
    "sas_token": OptionKey({_AZURE: "azure_storage_sas_key"}, "sas_key", secret=True),
    "client_id": OptionKey({_AZURE: "azure_storage_client_id"}, "client_id"),
    "client_secret": OptionKey(
        {_AZURE: "azure_storage_client_secret"}, "client_secret", secret=True
    ),
    "tenant_id": OptionKey({_AZURE: "azure_storage_tenant_id"}, "tenant_id"),
    "use_emulator": OptionKey({_AZURE: "azure_storage_use_emulator"}, "use_emulator"),
    "service_account_path": OptionKey({_GCS: "google_service_account"}, "service_account"),
    "service_account_key": OptionKey(
        {_GCS: "google_service_account_key"}, "service_account_key", secret=True
    ),
    "application_credentials": OptionKey(
        {_GCS: "google_application_credentials"}, "application_credentials"
    ),
}


def options_of(store: StoreKind) -> list[str]:
    """The option names `store` takes, in declaration order."""
    return [name for name, key in OPTION_KEYS.items() if store in key.deltalake]


def store_of(location: str) -> tuple[StoreKind, str] | None:
    """The store of an object-store URI and its canonical form (scheme family, no trailing
    `/`), or None for a local path or a scheme no store has."""
    parsed = urlparse(location)
    known = SCHEMES.get(parsed.scheme.lower())
    if known is None:
        return None
    store, scheme = known
    return store, f"{scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"
