"""Pipelines for test and benchmark lakes: one builder of an entry, one writer of the file.

Example:
    >>> orders_pipeline("o1", delete_mode="soft")["source"]
    'bronze/o1'
    >>> path = write_pipelines(tmp / "pipelines.yaml", [orders_pipeline("o1")])  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from cdf_platform.core.spec.pipeline_spec import PipelineSpec


def orders_pipeline(pipeline_id: str, **fields: Any) -> dict[str, Any]:
    """A pipeline of an `orders` bronze table `bronze/<id>` (`orders_bronze`) into
    `silver/<id>`."""
    return {
        "id": pipeline_id,
        "source": f"bronze/{pipeline_id}",
        "target": f"silver/{pipeline_id}",
        "keys": ["order_id"],
        "delete_mode": "hard",
        **fields,
    }


def pipeline_entry(pipeline: PipelineSpec | dict[str, Any]) -> dict[str, Any]:
    """`pipeline` as an entry of a pipelines file (a spec's fields that are set)."""
    if isinstance(pipeline, PipelineSpec):
        return pipeline.model_dump(mode="json", exclude_none=True)
    return dict(pipeline)


def write_pipelines(
    path: Path, pipelines: Iterable[PipelineSpec | dict[str, Any]], **sections: Any
) -> Path:
    """Write the pipelines file `path` listing `pipelines` (specs or entries), with further
    top-level `sections` (`storage=...`); return `path`."""
    document = {"pipelines": [pipeline_entry(p) for p in pipelines], **sections}
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path
