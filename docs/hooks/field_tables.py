"""MkDocs hook: the PipelineSpec field table of docs/pipeline-spec.md, generated from the spec's
own field descriptions (`cdf_platform.core.spec.PipelineSpec`), where the page says
`<!-- spec-fields -->`."""

from __future__ import annotations

from enum import Enum
from typing import Any

MARKER = "<!-- spec-fields -->"


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
    text = text.replace("typing.", "").replace("cdf_platform.core.spec.", "")
    return text.replace("|", "\\|")  # inside a table cell


def spec_fields_table() -> str:
    """The Markdown table of every PipelineSpec field: name, type, default, description."""
    from cdf_platform.core.spec import PipelineSpec

    rows = ["| field | type | default | meaning |", "|---|---|---|---|"]
    for name, field in PipelineSpec.model_fields.items():
        description = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| `{name}` | `{_type(field.annotation)}` | {_default(field)} | {description} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker with the generated table."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, spec_fields_table())
