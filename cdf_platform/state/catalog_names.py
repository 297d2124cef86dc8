"""Catalog table names, located without a JVM.

A pipeline may name its bronze or silver table by its catalog name (`bronze.orders`). Only
Spark can ask the catalog where that table lives (`cdf_platform.spark.table.catalog`), so every run
that does records the answer in the control tables; status, the checks, the sensors and the
maintenance plan read bronze's and silver's logs at the recorded location.

Example:
    >>> located = locate(spec, ControlTable("/lake/_control"))  # doctest: +SKIP
    >>> located.source  # doctest: +SKIP
    '/warehouse/bronze.db/orders'
"""

from __future__ import annotations

from typing import Any

from cdf_platform.core.errors import TableNameNotLocated
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.storage import is_table_name
from cdf_platform.state.control import ControlTable


def locate(
    spec: PipelineSpec,
    control: ControlTable,
    *,
    recorded: dict[str, dict[str, Any]] | None = None,
) -> PipelineSpec:
    """`spec` with each catalog name in `source`/`target` replaced by its recorded location
    (paths are returned as they are). The bronze asset keeps the name's last part.

    Args:
        recorded: the control tables' locations, when the caller has read them already.

    Raises:
        TableNameNotLocated: no run of the pipeline has located a name yet.
    """
    names = spec.table_names
    if not names:
        return spec
    recorded = control.read_locations() if recorded is None else recorded
    update: dict[str, str] = {"bronze_table": spec.bronze_name}
    for role, name in names.items():
        update[role] = _recorded_location(recorded, name, f"the {role} ", spec.id)
    return spec.model_copy(update=update)


def _recorded_location(
    recorded: dict[str, dict[str, Any]], name: str, what: str = "", pipeline_id: str | None = None
) -> str:
    """The location `recorded` holds for the catalog name `name`.

    Raises:
        TableNameNotLocated: none is recorded (`what` prefixes the name in the message; with
            `pipeline_id`, the action names the run that records it).
    """
    row = recorded.get(name)
    if row is None:
        action = (
            f"run the pipeline once (`cdf-platform run {pipeline_id}` or materialize its silver "
            "asset): the run asks Spark's catalog and records the location"
            if pipeline_id is not None
            else None
        )
        raise TableNameNotLocated(
            f"{what}{name!r} is a catalog name with no location recorded yet",
            pipeline_id=pipeline_id,
            table=name,
            action=action,
        )
    return str(row["location"])


def followed_location(spec: PipelineSpec, state: dict[str, Any] | None) -> str | None:
    """The bronze location the pipeline's watermark was taken at, when `source` is a catalog
    name (the control state's `source`); None for a path, which cannot move."""
    if state is None or "source" not in spec.table_names:
        return None
    value = state.get("source")
    return str(value) if value else None


def locate_table(table: str, control: ControlTable | None) -> str:
    """The location of one `source`/`target` value: a path as it is, a catalog name's recorded
    location.

    Raises:
        TableNameNotLocated: a catalog name no run has located yet.
    """
    if not is_table_name(table):
        return table
    return _recorded_location(control.read_locations() if control is not None else {}, table)


def located_specs(specs: list[PipelineSpec], control: ControlTable | None) -> list[PipelineSpec]:
    """`specs` with their catalog names located. A pipeline naming a table no run has located
    yet is left out: it has not run since it was named, so it holds no watermark."""
    if not any(spec.table_names for spec in specs):
        return specs
    if control is None:
        return [spec for spec in specs if not spec.table_names]
    recorded = control.read_locations()
    located = []
    for spec in specs:
        try:
            located.append(locate(spec, control, recorded=recorded))
        except TableNameNotLocated:
            continue
    return located
