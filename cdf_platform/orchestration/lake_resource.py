"""The control-table resource: where the platform's pipelines, lake and control tables are.

One resource answers "which pipelines exist, where do their tables live, and where is the load
log" for assets, checks, sensors and the IO manager. Nothing here starts Spark: the control
tables are read and written through `deltalake`.
"""

from pathlib import Path

import dagster as dg
from pydantic import Field

from cdf_platform.core.config import default_control_root, default_lake_root
from cdf_platform.core.spec import PipelineSpec, default_pipelines_file, find_spec, load_specs
from cdf_platform.state.control import ControlTable


def _default_pipelines_file() -> str:
    return str(default_pipelines_file().resolve())


class ControlTableResource(dg.ConfigurableResource):
    """The pipelines file, the lake root it is resolved against, and the control tables.

    Example:
        >>> resource = ControlTableResource(lake_root="/lake", pipelines_file="pipelines.yaml")
        >>> resource.spec("orders").target  # doctest: +SKIP
        '/lake/silver/orders'
        >>> resource.control().read_states()  # doctest: +SKIP
        {'orders': {...}}
    """

    lake_root: str = Field(
        default_factory=default_lake_root,
        description="Folder (or URI) that relative `source`/`target` locations of the pipelines "
        "file are resolved against; defaults to $CDF_LAKE_ROOT or ./lake.",
    )
    control_root: str | None = Field(
        default=None,
        description="Folder of the control tables (pipeline_state, load_log); defaults to "
        "$CDF_CONTROL_ROOT or <lake_root>/_control.",
    )
    pipelines_file: str = Field(
        default_factory=_default_pipelines_file,
        description="The pipelines YAML file; defaults to $CDF_PIPELINES_FILE or ./pipelines.yaml.",
    )

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def control(self) -> ControlTable:
        """The control tables (state and load log)."""
        return ControlTable(self.control_root or default_control_root(self.lake_root))

    def specs(self) -> list[PipelineSpec]:
        """Every pipeline of the pipelines file, locations resolved under the lake root.

        Raises:
            InvalidPipelineSpec: the file is missing or holds an invalid spec.
        """
        return load_specs(Path(self.pipelines_file), lake_root=self.lake_root)

    def spec(self, pipeline_id: str) -> PipelineSpec:
        """The resolved spec of `pipeline_id`.

        Raises:
            InvalidPipelineSpec: no such pipeline (or the file is invalid).
        """
        return find_spec(self.specs(), pipeline_id)

    def table_path(self, layer: str, table: str) -> str:
        """Where a platform-owned table `layer/table` (e.g. gold/...) lives under the lake."""
        return f"{self.lake_root.rstrip('/')}/{layer}/{table}"
