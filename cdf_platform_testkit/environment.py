"""Variables set in this process's environment for a block, then put back.

Example:
    >>> with environment({"CDF_EXAMPLE": "1"}):
    ...     os.environ["CDF_EXAMPLE"]
    '1'
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """`env` set in os.environ for the block, then what was there put back (the emulator
    fixtures and the CLI session use it)."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
