"""Azurite, Microsoft's Azure Storage emulator, serving the Blob API for the ADLS tests.

`make azurite` (a step of `make test`) installs the pinned npm package into `.tools/`. Only its
Blob service runs, in memory, on a free loopback port, with telemetry off.

The environment it gives is the emulator set-up of the Rust `object_store` crate, which
`deltalake` and `obstore` both read (`AZURE_STORAGE_USE_EMULATOR`, with the emulator's address
in `AZURITE_BLOB_STORAGE_URL` and its development account). Not a plain endpoint override
(`AZURE_STORAGE_ENDPOINT` + `AZURE_ALLOW_HTTP`): against Azure itself `object_store` lists "from
a key" with the Blob API's `startFrom` parameter, which Azurite ignores, so `deltalake` finds log
entries it did not ask for and cannot commit a table's version 2 ("Invalid table version: 1");
in emulator mode it filters the listing itself. Both URL forms work against it:
`az://<container>/<path>` and `abfss://<container>@<account>.dfs.core.windows.net/<path>`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.request
from email.utils import formatdate
from pathlib import Path

from cdf_platform_testkit.emulator import EmulatorProcess

REPOSITORY = Path(__file__).resolve().parents[1]
AZURITE_BLOB = REPOSITORY / ".tools" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's built-in development account and its published key: not secrets.
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
# How hadoop-azure names the account (the endpoint override sends its requests to Azurite).
ACCOUNT_HOST = f"{ACCOUNT}.dfs.core.windows.net"
# The Blob REST API version of the container request below (Azurite 3.35 serves it).
API_VERSION = "2021-08-06"
# The standard headers a Shared Key signature covers after the verb (Content-Encoding ... Range):
# all empty here, Content-Length included (it is signed as empty when 0).
_EMPTY_STANDARD_HEADERS = "\n" * 11


class Azurite(EmulatorProcess):
    """Azurite's Blob service with one container.

    Example:
        >>> with Azurite(tmp_path) as azurite:  # doctest: +SKIP
        ...     os.environ.update(azurite.env())
        ...     lake = f"az://{azurite.container}/lake"
    """

    name = "azurite"

    def __init__(self, workdir: Path, container: str = "lake") -> None:
        super().__init__(workdir)
        self.container = container

    def command(self) -> list[str]:
        """Azurite's Blob service on this port, in memory, quiet and without telemetry."""
        return [
            str(AZURITE_BLOB),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(self.port),
            "--inMemoryPersistence",
            # Megabytes of blob content it keeps (default: half the machine's memory).
            "--extentMemoryLimit",
            "256",
            "--disableTelemetry",
            # The clients may speak a newer REST API version than the emulator knows.
            "--skipApiVersionCheck",
            "--silent",
        ]

    def env(self) -> dict[str, str]:
        """The variables that point deltalake and obstore at this emulator's account."""
        return {
            "AZURE_STORAGE_USE_EMULATOR": "true",
            "AZURITE_BLOB_STORAGE_URL": self.endpoint,
            "AZURE_STORAGE_ACCOUNT_NAME": ACCOUNT,
            "AZURE_STORAGE_ACCOUNT_KEY": ACCOUNT_KEY,
        }

    def hadoop_conf(self) -> dict[str, str]:
        """The Hadoop settings that let Spark's ABFS connector (hadoop-azure 3.5.0) use this
        emulator through `abfs://<container>@devstoreaccount1.dfs.core.windows.net/...`.

        Azurite serves the Blob API only, not ADLS Gen2's DFS API, so the account is declared
        flat-namespace with the Blob endpoint as its service (hadoop-azure >= 3.4.2). The
        endpoint override sends requests to 127.0.0.1:<port>/devstoreaccount1/<container>
        (path style) over plain http (`abfs://`, not `abfss://`), which needs the JDK's HTTP
        client: the default Apache client demands an SSL socket factory even for http. The
        connector's own metrics stay off: it sends them to the account from a shutdown hook,
        which retries against the emulator stopped by then and keeps the JVM alive for minutes.
        """
        return {
            f"fs.azure.account.key.{ACCOUNT_HOST}": ACCOUNT_KEY,
            "fs.azure.abfs.endpoint": f"127.0.0.1:{self.port}",
            "fs.azure.account.hns.enabled": "false",
            "fs.azure.fns.account.service.type": "BLOB",
            "fs.azure.always.use.https": "false",
            "fs.azure.networking.library": "JDK_HTTP_URL_CONNECTION",
            "fs.azure.metrics.collection.enabled": "false",
        }

    def abfs_root(self) -> str:
        """The container as Spark reaches it here: `abfs://` (plain http), account host."""
        return f"abfs://{self.container}@{ACCOUNT_HOST}"

    def abfss_root(self) -> str:
        """The container as Hadoop's ABFS connector names it (`abfss://c@account.dfs...`)."""
        return f"abfss://{self.container}@{ACCOUNT_HOST}"

    def prepare(self) -> None:
        """Create the container (object stores write into one; deltalake does not create it)."""
        self._signed_put(
            f"{self.container}?restype=container", f"{self.container}\nrestype:container"
        )

    def _signed_put(self, target: str, canonical_path: str) -> None:
        """An empty PUT to the Blob API authorised with the account key (Shared Key scheme:
        an HMAC-SHA256 over the request's canonical form)."""
        date = formatdate(usegmt=True)
        headers = {"x-ms-date": date, "x-ms-version": API_VERSION}
        canonical_headers = "".join(f"{name}:{value}\n" for name, value in sorted(headers.items()))
        # The verb, the standard headers, the x-ms-* headers and the resource: /<account>/ and
        # the path as requested (which starts with the account on the emulator).
        resource = f"/{ACCOUNT}/{ACCOUNT}/{canonical_path}"
        to_sign = f"PUT\n{_EMPTY_STANDARD_HEADERS}{canonical_headers}{resource}"
        digest = hmac.new(base64.b64decode(ACCOUNT_KEY), to_sign.encode(), hashlib.sha256)
        signature = base64.b64encode(digest.digest()).decode()
        request = urllib.request.Request(
            f"{self.endpoint}/{ACCOUNT}/{target}",
            method="PUT",
            headers={
                **headers,
                "Authorization": f"SharedKey {ACCOUNT}:{signature}",
                "Content-Length": "0",
            },
        )
        with urllib.request.urlopen(request, timeout=10):
            pass
