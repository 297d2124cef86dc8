"""The layout's state figure counts what a function mutates, not the constants beside it."""

from __future__ import annotations

from pathlib import Path

from bench.layout_state import state_items

MODULES = {
    "__init__.py": "",
    "tables.py": """
import functools
import os

TITLES = {"a": "A"}          # read only: a constant
SEEN: dict[str, int] = {}    # item assigned in a function
PENDING = []                 # appended to from another module
NAMES = set()                # added to through the module's name
BUILT = {}
BUILT["x"] = 1               # filled at import: a constant too


def remember(key: str) -> None:
    SEEN[key] = len(TITLES)


def shadowed(SEEN: dict[str, int]) -> None:
    SEEN["k"] = 1            # the parameter, not the module's dict


@functools.lru_cache(maxsize=None)
def cached() -> int:
    return 1


class Holder:
    @functools.cache
    def method(self) -> int:
        return 2


def front_door() -> None:
    os.environ["A"] = "1"
    os.environ.setdefault("B", "2")
    os.putenv("C", "3")
    copy = dict(os.environ)
    copy["D"] = "4"          # a copy of the environment, not the process's
""",
    "users.py": """
from cdf_platform import tables
from cdf_platform.tables import PENDING as QUEUE


def use() -> None:
    QUEUE.append(1)
    tables.NAMES.add("n")
    local = []
    local.append(2)
""",
}


def test_only_what_a_function_mutates_is_counted(tmp_path: Path) -> None:
    package = tmp_path / "cdf_platform"
    package.mkdir()
    for name, text in MODULES.items():
        (package / name).write_text(text)
    assert state_items(tmp_path) == [
        "cdf_platform/tables.py:6 SEEN (mutated in remember)",
        "cdf_platform/tables.py:7 PENDING (mutated in cdf_platform/users.py::use)",
        "cdf_platform/tables.py:8 NAMES (mutated in cdf_platform/users.py::use)",
        "cdf_platform/tables.py:22 cached() cached",
        "cdf_platform/tables.py:28 Holder.method() cached",
        "cdf_platform/tables.py:33 os.environ written in front_door()",
        "cdf_platform/tables.py:34 os.environ written in front_door()",
        "cdf_platform/tables.py:35 os.environ written in front_door()",
    ]
