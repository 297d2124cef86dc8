"""Long randomized runs are marked `slow` and skipped unless selected with `-m slow`."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `slow` tests when no marker expression was given (the default CI run)."""
    if config.getoption("markexpr"):
        return
    skip = pytest.mark.skip(reason="slow: run with `pytest -m slow` or `python -m bench.fuzz`")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)
