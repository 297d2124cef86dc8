"""MkDocs hook: the API reference's entries, generated from the package's one list of public
names (`cdf_platform._HOMES`). Where a page says `<!-- public names: MODULE ... -->`, each
public name defined in one of those modules (or a module under one) gets its
`::: cdf_platform.<Name>` entry, in the list's order. A page with such markers must place every
public name exactly once, so a name added to the package cannot be left out of the reference:
the build fails instead."""

from __future__ import annotations

import re
from typing import Any

from mkdocs.exceptions import PluginError
from pydantic import BaseModel

import cdf_platform
from cdf_platform import _HOMES

MARKER = re.compile(r"<!-- public names: ([\w. ]+) -->")


def _within(home: str, modules: list[str]) -> bool:
    return any(home == module or home.startswith(module + ".") for module in modules)


def _entry(name: str) -> str:
    """The mkdocstrings entry of public name `name`."""
    value = getattr(cdf_platform, name)
    if isinstance(value, type) and issubclass(value, BaseModel):
        # A pydantic model (the spec, the component, the resources) is configured through its
        # fields, each described by its `Field(description=...)` and tabled from it where it is
        # set (the PipelineSpec page); its methods serve the platform, not the user.
        return f"::: cdf_platform.{name}\n    options:\n      members: false\n"
    return f"::: cdf_platform.{name}\n"


def public_entries(markdown: str) -> str:
    """`markdown` with each marker replaced by the entries of its public names.

    Raises:
        PluginError: the markers place a public name twice, or leave one out.
    """
    placed: list[str] = []

    def entries(match: re.Match[str]) -> str:
        names = [n for n, home in _HOMES.items() if _within(home, match.group(1).split())]
        placed.extend(names)
        return "\n".join(_entry(n) for n in names)

    expanded = MARKER.sub(entries, markdown)
    if placed:
        twice = sorted({n for n in placed if placed.count(n) > 1})
        missing = [n for n in _HOMES if n not in placed]
        if twice or missing:
            raise PluginError(f"public names placed twice: {twice}; not placed: {missing}")
    return expanded


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the markers of a page with its public names' entries."""
    return public_entries(markdown)
