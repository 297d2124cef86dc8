"""Table locations as the JVM-free side names them: a local path, a `file:` URI, or an
object-store URI (`s3://`/`s3a://`/`s3n://`, `az://`/`abfss://`, `gs://`).

Example:
    >>> is_local("/lake/bronze/orders"), is_local("s3://bucket/lake/bronze/orders")
    (True, False)
    >>> same_object_store_root("s3a://bucket/t/part-0.parquet", "s3://bucket/t")
    'part-0.parquet'
"""

from __future__ import annotations

from urllib.parse import urlparse

# Schemes that name the same S3 objects (Hadoop's connectors; obstore reads s3:// and s3a://).
_S3_SCHEMES = ("s3", "s3a", "s3n")


def is_local(location: str) -> bool:
    """Whether `location` is a local path or a `file:` URI (not an object store)."""
    return urlparse(location).scheme in ("", "file") or _is_windows_drive(location)


def _is_windows_drive(location: str) -> bool:
    return len(location) > 1 and location[1] == ":" and location[0].isalpha()


def local_path(location: str) -> str | None:
    """The local filesystem path behind `location`, or None for an object-store URI."""
    if not is_local(location):
        return None
    parsed = urlparse(location)
    return parsed.path if parsed.scheme == "file" else location


def same_object_store_root(path: str, root: str) -> str | None:
    """`path` relative to the object-store folder `root`, or None when it is not under it.

    `s3://`, `s3a://` and `s3n://` name the same objects, so `s3a://b/t/x` is under `s3://b/t`.
    """
    given, base = urlparse(path), urlparse(root)

    def family(scheme: str) -> str:
        return "s3" if scheme in _S3_SCHEMES else scheme

    if family(given.scheme) != family(base.scheme) or given.netloc != base.netloc:
        return None
    prefix = base.path.rstrip("/") + "/"
    return given.path[len(prefix) :] if given.path.startswith(prefix) else None
