"""The package's public face is listed once, in `cdf_platform._HOMES`: what type checkers see
(the `TYPE_CHECKING` imports) names exactly those names from exactly those modules, and each
name resolves, on first use, to what its module defines."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import cdf_platform


def _type_checking_imports() -> dict[str, str]:
    """Name -> module of every re-export in the package's `if TYPE_CHECKING:` block."""
    tree = ast.parse(Path(cdf_platform.__file__).read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    imports: dict[str, str] = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module, ast.unparse(node)
        for alias in node.names:
            # `X as X`: the explicit re-export, which no checker mistakes for a private import.
            assert alias.asname == alias.name, ast.unparse(node)
            imports[alias.name] = node.module
    return imports


def test_type_checkers_see_exactly_the_public_names() -> None:
    assert _type_checking_imports() == cdf_platform._HOMES


def test_each_public_name_is_what_its_home_module_defines() -> None:
    assert cdf_platform.__all__ == ["__version__", *cdf_platform._HOMES]
    for name, home in cdf_platform._HOMES.items():
        value = getattr(cdf_platform, name)
        assert value is getattr(importlib.import_module(home), name)
        assert value.__module__ == home, f"{name} is defined in {value.__module__}, not {home}"
