"""Where a pipeline's `source`/`target` is: a catalog table name (`schema.table`,
`catalog.schema.table`) or a path or URI, resolved under the lake root when relative; and the
locations a Spark session for a set of pipelines touches.

Example:
    >>> is_table_name("main.bronze.orders"), is_table_name("bronze/orders")
    (True, False)
    >>> resolve_location("s3://lake/bronze/orders", "/lake")
    's3://lake/bronze/orders'
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from cdf_platform.core.config import resolve_root

if TYPE_CHECKING:
    from cdf_platform.core.spec import PipelineSpec

# A catalog table name: `schema.table` or `catalog.schema.table`. A folder whose name has a dot
# is written as a path (`./orders.v2`, or absolute).
TABLE_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){1,2}$")


def storage_locations(specs: Iterable[PipelineSpec], *roots: str) -> list[str]:
    """`roots` (lake and control roots) and every source and target of `specs` given as a path:
    what a Spark session for these pipelines reads and writes (a catalog name's location is
    the catalog's to know)."""
    locations = (location for spec in specs for location in (spec.source, spec.target))
    return [*roots, *(location for location in locations if not is_table_name(location))]


def is_table_name(location: str) -> bool:
    """Whether a `source`/`target` value is a catalog table name rather than a path."""
    return TABLE_NAME_PATTERN.match(location) is not None


def resolve_location(location: str, lake_root: str) -> str:
    """`location` if it is absolute, a URI or a catalog name, else `lake_root/location`, made
    absolute when local (`resolve_root`): a relative location or root never reaches Spark."""
    if "://" in location or location.startswith("/") or is_table_name(location):
        return location
    return resolve_root(f"{lake_root.rstrip('/')}/{location}")
