"""MkDocs hook: field tables generated from the models' own field descriptions, where a page
says `<!-- fields: package.module.Class -->` (the PipelineSpec, and the Dagster run configs of
the silver assets and the maintenance jobs), so the reference cannot drift from the code."""

from __future__ import annotations

import importlib
import re
from enum import Enum
from typing import Any

MARKER = re.compile(r"<!-- fields: ([\w.]+) -->")


def _default(field: Any) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, Enum):
        value = value.value
    if value in (None, [], {}):
        return "none"
    if isinstance(value, bool):
        value = str(value).lower()  # as YAML writes it
    return f"`{value}`"


def _type(annotation: Any) -> str:
    name = getattr(annotation, "__name__", None)
    text = name if name and not getattr(annotation, "__args__", None) else str(annotation)
    text = re.sub(r"\b(typing|cdf_platform(\.\w+)*)\.", "", text)
    return text.replace("|", "\\|")  # inside a table cell


def fields_table(model: type) -> str:
    """The Markdown table of every field of the pydantic `model`: name, type, default and
    description."""
    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        description = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{name}` | `{_type(field.annotation)}` | {_default(field)} | {description} |")
    return "\n".join(rows)


def _model(path: str) -> type:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace each marker with its model's table."""
    return MARKER.sub(lambda match: fields_table(_model(match.group(1))), markdown)
