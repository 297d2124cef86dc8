"""`StorageOptionsConfig`: one location prefix's object-store options in the lake resource's
`storage` (`LakeLayout`), the Dagster face of the pipelines file's `storage:` entries
(`cdf_platform.core.storage`); each field shows its option's description
(`cdf_platform.core.cloud_options.StoreOptions`).

Secrets are `dg.EnvVar`s: the UI shows the variable's name, and the value is read when the
lake is loaded (`LakeLayout.lake`).
"""

from __future__ import annotations

from collections.abc import Mapping

import dagster as dg
from pydantic import Field

from cdf_platform.core.cloud_options import EnvRef, StoreOptions
from cdf_platform.core.storage import StorageConfig


def _about(option: str) -> str:
    """The core model's description of `option`."""
    return StoreOptions.model_fields[option].description or option


class StorageOptionsConfig(dg.Config):
    """The object-store options of one location prefix (docs/storage.md).

    Example:
        >>> StorageOptionsConfig(  # doctest: +SKIP
        ...     endpoint="https://minio.internal:9000",
        ...     access_key_id=dg.EnvVar("LAKE_A_KEY_ID"),
        ...     secret_access_key=dg.EnvVar("LAKE_A_SECRET"),
        ... )
    """

    endpoint: str | None = Field(default=None, description=_about("endpoint"))
    region: str | None = Field(default=None, description=_about("region"))
    allow_http: bool | None = Field(default=None, description=_about("allow_http"))
    access_key_id: str | None = Field(default=None, description=_about("access_key_id"))
    secret_access_key: str | None = Field(
        default=None, repr=False, description=_about("secret_access_key")
    )
    session_token: str | None = Field(default=None, repr=False, description=_about("session_token"))
    virtual_hosted_style_request: bool | None = Field(
        default=None, description=_about("virtual_hosted_style_request")
    )
    skip_signature: bool | None = Field(default=None, description=_about("skip_signature"))
    account_name: str | None = Field(default=None, description=_about("account_name"))
    account_key: str | None = Field(default=None, repr=False, description=_about("account_key"))
    sas_token: str | None = Field(default=None, repr=False, description=_about("sas_token"))
    client_id: str | None = Field(default=None, description=_about("client_id"))
    client_secret: str | None = Field(default=None, repr=False, description=_about("client_secret"))
    tenant_id: str | None = Field(default=None, description=_about("tenant_id"))
    use_emulator: bool | None = Field(default=None, description=_about("use_emulator"))
    service_account_path: str | None = Field(
        default=None, description=_about("service_account_path")
    )
    service_account_key: str | None = Field(
        default=None, repr=False, description=_about("service_account_key")
    )
    application_credentials: str | None = Field(
        default=None, description=_about("application_credentials")
    )

    @classmethod
    def of(cls, options: StoreOptions) -> StorageOptionsConfig:
        """`options` as resource config: a reference to a variable (`{env: NAME}`) becomes a
        `dg.EnvVar`, so the UI shows its name and never its value."""
        return cls.model_validate(
            {
                name: dg.EnvVar(value.env) if isinstance(value, EnvRef) else value
                for name, value in options.values().items()
            }
        )

    @classmethod
    def of_config(cls, config: StorageConfig) -> dict[str, StorageOptionsConfig]:
        """Every entry of `config` (its references not read) as resource config by prefix."""
        return {entry.prefix: cls.of(entry.options) for entry in config.entries}

    @staticmethod
    def to_config(by_prefix: Mapping[str, StorageOptionsConfig], origin: str) -> StorageConfig:
        """Resource config by prefix as the platform's configuration (`of_config`'s inverse;
        a `dg.EnvVar` not read yet stays a reference to its variable); `origin` names it in
        errors."""
        return StorageConfig.of(
            {prefix: options.store_options() for prefix, options in by_prefix.items()},
            origin=origin,
        )

    def store_options(self) -> StoreOptions:
        """These options as the platform's model; a `dg.EnvVar` not read yet becomes a
        reference to its variable (`{env: NAME}`), read when the lake is loaded."""
        values: dict[str, object] = {}
        for name, value in self:
            if isinstance(value, dg.EnvVar):
                values[name] = EnvRef(env=value.env_var_name)
            elif value is not None:
                values[name] = value
        return StoreOptions.model_validate(values)
