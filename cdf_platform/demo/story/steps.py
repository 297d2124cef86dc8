"""A step of the demo's story (its name, time and the figures it produced), and the failure of
one that did not end as the story says it must.

Example:
    >>> Step("seed bronze", 1.5, {"bronze_orders_version": 0}).figures
    {'bronze_orders_version': 0}
"""

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Step:
    """One step of the story and the figures it produced."""

    name: str
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


class DemoFailed(RuntimeError):
    """A step of the demo did not end as the story says it must."""
