"""Where a lake's tables are and how their stores are reached: the object-store options per
location prefix (what the pipelines file's `storage:` section and the lake resource's `storage`
hold, and which entry a location takes), and where a pipeline's `source`/`target` is (a catalog
table name or a path or URI, resolved under the lake root when relative).

    storage:
      s3://lake-a:                        # every location under this prefix
        endpoint: https://minio.internal:9000
        region: eu-west-1
        access_key_id: {env: LAKE_A_KEY_ID}         # read from the environment
        secret_access_key: {env: LAKE_A_SECRET}
      abfss://silver@account.dfs.core.windows.net:
        account_key: {env: SILVER_ACCOUNT_KEY}

- Option names are obstore's; what each store takes and the key each reader gets for it is
  `cdf_platform.core.cloud_options`.
- The longest prefix that matches a location wins, at a path boundary (`s3://lake-a` is no
  prefix of `s3://lake-ab`); `s3://`, `s3a://` and `s3n://` name the same objects, as do
  `abfs://` and `abfss://`. What an entry leaves unset, and every location no prefix matches,
  keeps coming from the environment (AWS_*, AZURE_STORAGE_*, GOOGLE_*).
- A text value may be `{env: NAME}`: the variable is read when a lake is loaded
  (`cdf_platform.core.lake.Lake.load`, `StorageConfig.resolved`), so no secret has to be written
  into a file.
- The configuration is a value: a lake's travels with it (`ControlTable.storage`,
  `SparkSettings.storage`) to every reader of its locations, which asks `entry_for`. The
  pipelines file's section and the lake resource's options are merged in one place
  (`cdf_platform.core.lake.Lake.configured_storage`); a prefix in both is refused (`merged`).
- A `source`/`target` is a catalog name (`schema.table`, `catalog.schema.table`) or a path or
  URI; a relative path is resolved under the lake root (`resolve_location`).

Example:
    >>> config = StorageConfig.parse(
    ...     {"s3://lake-a": {"endpoint": "http://127.0.0.1:9000", "allow_http": True}},
    ...     origin="pipelines.yaml",
    ... )
    >>> config.entry_for("s3a://lake-a/bronze/orders").deltalake_options()
    {'aws_endpoint': 'http://127.0.0.1:9000', 'allow_http': 'true'}
    >>> config.entry_for("s3://lake-ab/bronze/orders") is None
    True
    >>> is_table_name("main.bronze.orders"), is_table_name("bronze/orders")
    (True, False)
    >>> resolve_location("s3://lake/bronze/orders", "/lake")
    's3://lake/bronze/orders'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

from pydantic import ValidationError

from cdf_platform.core.cloud_options import (
    OPTION_KEYS,
    SCHEMES,
    EnvRef,
    StoreKind,
    StoreOptions,
    options_of,
    store_of,
)
from cdf_platform.core.config import resolve_root
from cdf_platform.core.errors import InvalidStorageConfig

# A catalog table name: `schema.table` or `catalog.schema.table`. A folder whose name has a dot
# is written as a path (`./orders.v2`, or absolute).
TABLE_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){1,2}$")


@dataclass(frozen=True)
class StorageEntry:
    """The options of one location prefix.

    Attributes:
        prefix: The prefix as written, without a trailing `/`.
        store: The store its scheme names.
        options: Its options (`EnvRef` values until the configuration is resolved).
        origin: Where it was written (the pipelines file's path, or the lake resource).
    """

    prefix: str
    store: StoreKind
    options: StoreOptions
    origin: str

    @property
    def canonical(self) -> str:
        """The prefix with the scheme that names the same objects (`s3a://b` -> `s3://b`)."""
        found = store_of(self.prefix)
        assert found is not None  # checked when the entry was made
        return found[1]

    def matches(self, location: str) -> bool:
        """Whether `location` is at or under this prefix (at a path boundary)."""
        found = store_of(location)
        if found is None:
            return False
        return found[1] == self.canonical or found[1].startswith(f"{self.canonical}/")

    def values(self) -> dict[str, str | bool]:
        """The options that are set, resolved (see `resolved`)."""
        values: dict[str, str | bool] = {}
        for name, value in self.options.values().items():
            if isinstance(value, EnvRef):
                raise AssertionError(f"{self.prefix}: {name} is unresolved; resolve it first")
            values[name] = value
        return values

    def resolved(self, environ: Mapping[str, str]) -> StorageEntry:
        """This entry with every `{env: NAME}` value read from `environ`.

        Raises:
            InvalidStorageConfig: a referenced variable is not set.
        """
        updates: dict[str, str] = {}
        for name, value in self.options.values().items():
            if not isinstance(value, EnvRef):
                continue
            if value.env not in environ:
                raise InvalidStorageConfig(
                    f"storage prefix {self.prefix} ({self.origin}): option `{name}` reads the "
                    f"environment variable {value.env}, which is not set",
                    table=self.prefix,
                    action=f"set {value.env} in the environment of every process that reads "
                    "the lake (the command line, Dagster's code server and its runs), or "
                    "correct the reference",
                )
            updates[name] = environ[value.env]
        return replace(self, options=self.options.model_copy(update=updates)) if updates else self

    def obstore_config(self) -> dict[str, str | bool]:
        """The options as obstore's store config (`from_url(config=...)`)."""
        return {
            key.obstore: value
            for name, value in self.values().items()
            if (key := OPTION_KEYS[name]).obstore is not None
        }

    def obstore_client_options(self) -> dict[str, bool]:
        """The options obstore takes as HTTP client options (`allow_http`)."""
        return {
            name: bool(value)
            for name, value in self.values().items()
            if OPTION_KEYS[name].obstore is None
        }

    def deltalake_options(self) -> dict[str, str]:
        """The options as `deltalake`'s `storage_options` (object_store keys, text values)."""
        return {
            OPTION_KEYS[name].deltalake[self.store]: _text(value)
            for name, value in self.values().items()
        }

    def describe(self) -> str:
        """Where these options come from and the endpoint they use (no secret in it)."""
        endpoint = self.options.endpoint
        shown = f", endpoint {endpoint}" if isinstance(endpoint, str) else ""
        return f"the options of storage prefix {self.prefix} ({self.origin}{shown})"


def _text(value: str | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else value


def storage_entry(prefix: str, options: StoreOptions, origin: str) -> StorageEntry:
    """One prefix's entry, its scheme and options checked.

    Raises:
        InvalidStorageConfig: the prefix is not an object-store URI of a known scheme, names
            no bucket or container, or an option is not one its store takes.
    """
    written = prefix.rstrip("/")
    parsed = urlparse(written)
    known = SCHEMES.get(parsed.scheme.lower())
    if known is None:
        raise InvalidStorageConfig(
            f"storage prefix {prefix!r} ({origin}) has "
            + (f"the unknown scheme `{parsed.scheme}`" if parsed.scheme else "no scheme")
            + f"; storage options apply to object-store URIs: {', '.join(sorted(SCHEMES))}",
            action="write the prefix as an object-store URI: s3://bucket[/path], "
            "abfss://container@account.dfs.core.windows.net[/path] or gs://bucket[/path]",
        )
    if not parsed.netloc:
        raise InvalidStorageConfig(
            f"storage prefix {prefix!r} ({origin}) names no bucket or container",
            action="write the prefix with its bucket, e.g. s3://bucket",
        )
    store = known[0]
    foreign = [name for name in options.values() if store not in OPTION_KEYS[name].deltalake]
    if foreign:
        raise InvalidStorageConfig(
            f"storage prefix {written} ({origin}): `{foreign[0]}` is not an option of {store} "
            f"locations; {store} takes: {', '.join(options_of(store))}",
            table=written,
        )
    return StorageEntry(written, store, options, origin)


def _describe(err: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in item['loc']) or 'value'}: {item['msg']}"
        for item in err.errors()
    )


@dataclass(frozen=True)
class StorageConfig:
    """The storage options of every configured prefix (see the module docstring)."""

    entries: tuple[StorageEntry, ...] = ()

    @classmethod
    def parse(cls, section: Any, *, origin: str) -> StorageConfig:
        """Validate a `storage:` section: a mapping of prefix -> options.

        Raises:
            InvalidStorageConfig: not a mapping, an unknown option or scheme, a bad value.
        """
        if section is None:
            return cls()
        if not isinstance(section, dict):
            raise InvalidStorageConfig(
                f"`storage:` in {origin} must map location prefixes to their options",
                action="write e.g. `storage: {s3://bucket: {endpoint: ..., region: ...}}`",
            )
        entries = []
        for prefix, raw in section.items():
            if not isinstance(prefix, str) or not isinstance(raw, dict):
                raise InvalidStorageConfig(
                    f"storage prefix {prefix!r} in {origin} must map to a mapping of options",
                    action="write one `option: value` per line under the prefix",
                )
            store = storage_entry(prefix, StoreOptions(), origin).store  # the scheme, first
            unknown = sorted(str(key) for key in raw if key not in OPTION_KEYS)
            if unknown:
                raise InvalidStorageConfig(
                    f"storage prefix {prefix} ({origin}) has the unknown option `{unknown[0]}`; "
                    f"{store} takes: {', '.join(options_of(store))}",
                    table=prefix,
                )
            try:
                options = StoreOptions.model_validate(raw)
            except ValidationError as err:
                raise InvalidStorageConfig(
                    f"storage prefix {prefix} ({origin}): {_describe(err)}",
                    table=prefix,
                    action="give text options a string or `{env: NAME}`, and on/off options "
                    "true or false",
                ) from err
            entries.append(storage_entry(prefix, options, origin))
        return cls(()).merged(cls(tuple(entries)))

    @classmethod
    def of(cls, options: Mapping[str, StoreOptions], *, origin: str) -> StorageConfig:
        """The configuration of typed options by prefix (the lake resource's `storage`).

        Raises:
            InvalidStorageConfig: an unknown scheme, an option its store does not take.
        """
        entries = tuple(storage_entry(p, o, origin) for p, o in options.items())
        return cls(()).merged(cls(entries))

    def merged(self, other: StorageConfig) -> StorageConfig:
        """This configuration and `other`'s entries.

        Raises:
            InvalidStorageConfig: both configure one prefix (`s3://b` and `s3a://b/` are one).
        """
        seen = {entry.canonical: entry for entry in self.entries}
        for entry in other.entries:
            if (twin := seen.get(entry.canonical)) is not None:
                raise InvalidStorageConfig(
                    f"storage prefix {entry.prefix} is configured twice: in {twin.origin} and "
                    f"in {entry.origin}",
                    table=entry.prefix,
                    action="keep one entry per prefix (write secrets as environment "
                    "references, `{env: NAME}` in YAML or dg.EnvVar in the resource)",
                )
            seen[entry.canonical] = entry
        return StorageConfig(tuple(seen.values()))

    def resolved(self, environ: Mapping[str, str]) -> StorageConfig:
        """Every `{env: NAME}` value read from `environ`.

        Raises:
            InvalidStorageConfig: a referenced variable is not set.
        """
        return StorageConfig(tuple(entry.resolved(environ) for entry in self.entries))

    def entry_for(self, location: str) -> StorageEntry | None:
        """The entry of the longest prefix `location` is under, or None (the environment's
        settings apply)."""
        matching = [entry for entry in self.entries if entry.matches(location)]
        return max(matching, key=lambda entry: len(entry.canonical), default=None)

    @property
    def prefixes(self) -> list[str]:
        """The configured prefixes, as written."""
        return [entry.prefix for entry in self.entries]


# No configured options: every location reads the environment's settings alone (a local lake,
# or one whose stores the environment configures).
ENVIRONMENT_ONLY = StorageConfig()


def is_table_name(location: str) -> bool:
    """Whether a `source`/`target` value is a catalog table name rather than a path."""
    return TABLE_NAME_PATTERN.match(location) is not None


def resolve_location(location: str, lake_root: str) -> str:
    """`location` if it is absolute, a URI or a catalog name, else `lake_root/location`, made
    absolute when local (`resolve_root`): a relative location or root never reaches Spark."""
    if "://" in location or location.startswith("/") or is_table_name(location):
        return location
    return resolve_root(f"{lake_root.rstrip('/')}/{location}")
