"""Put, copy and delete objects on the test S3 server, through obstore (real HTTP)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import obstore
from obstore.store import from_url


def upload_folder(folder: Path | str, uri: str) -> int:
    """Copy every file under local `folder` to the object-store folder `uri` (8 PUTs at a
    time); the count."""
    store = from_url(uri)
    files = [Path(root, name) for root, _, names in os.walk(folder) for name in names]

    def put(local: Path) -> None:
        obstore.put(store, local.relative_to(folder).as_posix(), local.read_bytes())

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))
    return len(files)


def put_object(uri: str, relative: str, body: bytes) -> None:
    """Write (or overwrite) one object under the folder `uri`."""
    obstore.put(from_url(uri), relative, body)


def delete_object(uri: str, relative: str) -> None:
    """Delete one object under the folder `uri`."""
    obstore.delete(from_url(uri), relative)


def object_names(uri: str, prefix: str | None = None) -> list[str]:
    """The objects under the folder `uri` (optionally under `prefix`), relative, sorted."""
    found = []
    for batch in obstore.list(from_url(uri), prefix=prefix):
        found += [str(meta["path"]) for meta in batch]
    return sorted(found)
