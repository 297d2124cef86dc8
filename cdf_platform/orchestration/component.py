"""`CdfPipelinesComponent`: cdf_platform pipelines declared in a Dagster Component's
`defs.yaml`, beside the classic entry point (`cdf_platform.definitions` and a pipelines file).

It takes the PipelineSpec fields (docs/pipeline-spec.md), inline or from a pipelines
file, and builds exactly what the classic entry point builds for them
(`cdf_platform.orchestration.platform`): silver assets with their checks, external bronze
assets, the jobs, schedules and sensors, and the `spark` and `lake` resources. One component
holds all the pipelines of a code location (its jobs and resources are named once).

An inline pipeline has a typed YAML schema, `PipelineAttributes`, made from PipelineSpec's
fields: `dg check yaml` reports a misspelt or mistyped field at its line, and PipelineSpec still
judges the values when the definitions load (`InvalidPipelineSpec`).

Example `defs.yaml` (`dg scaffold defs cdf_platform.orchestration.component.CdfPipelinesComponent
pipelines` writes one like it):

    type: cdf_platform.orchestration.component.CdfPipelinesComponent
    attributes:
      lake_root: "{{ env.CDF_LAKE_ROOT }}"
      pipelines:
        - id: orders
          source: bronze/orders
          target: silver/orders
          keys: [order_id]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import dagster as dg
from pydantic import BaseModel, Field, create_model

from cdf_platform.core.alert_config import AlertConfig
from cdf_platform.core.config import default_automation
from cdf_platform.core.errors import InvalidAlertConfig, InvalidPipelineSpec
from cdf_platform.core.lake import Lake
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.spec.spec_file import ParsedFiles, load_alerts, load_specs, parse_specs
from cdf_platform.orchestration.platform import platform_defs
from cdf_platform.orchestration.shared.resources import LakeLayout

COMPONENT_TYPE = "cdf_platform.orchestration.component.CdfPipelinesComponent"
# What `dg scaffold defs` writes: one pipeline to rename, on the embedded lake.
SCAFFOLD_ATTRIBUTES: dict[str, Any] = {
    "pipelines": [
        {
            "id": "orders",
            "source": "bronze/orders",
            "target": "silver/orders",
            "keys": ["order_id"],
            "max_allowed_lag_hours": 24,
            "min_headroom_hours": 24,
        }
    ]
}

PIPELINES_DESCRIPTION = (
    "The pipelines, each with the PipelineSpec fields (id, source, target, keys, delete_mode, "
    "...: docs/pipeline-spec.md). Set this or `pipelines_file`."
)


def _attributes_model(spec: type[BaseModel]) -> type[dg.Model]:
    """The YAML schema of one pipeline: `spec`'s fields, names, types and descriptions, each
    optional and, unless a string already, also a string (a `{{ env.X }}` template)."""
    fields: dict[str, Any] = {}
    for name, field in spec.model_fields.items():
        annotation: Any = field.annotation
        # Required fields and value rules (patterns, bounds, consistency) stay PipelineSpec's to
        # check when the definitions load, with its messages (InvalidPipelineSpec).
        fields[name] = (
            annotation if annotation is str else annotation | str,
            Field(default=None, description=field.description),
        )
    return create_model(
        "PipelineAttributes",
        __base__=dg.Model,
        __doc__="One pipeline of `CdfPipelinesComponent`: the PipelineSpec fields.",
        **fields,
    )


PipelineAttributes = _attributes_model(PipelineSpec)


def _declared_pipelines(
    context: dg.ResolutionContext, pipelines: list[BaseModel]
) -> list[dict[str, Any]]:
    """The pipelines as written (the fields set, templates rendered), for `parse_specs`."""
    return [
        context.at_path(index).resolve_value(pipeline.model_dump(exclude_unset=True))
        for index, pipeline in enumerate(pipelines)
    ]


def _with_typed_pipelines(derived: type[BaseModel]) -> type[BaseModel]:
    """`derived` (the schema Dagster derives for the component) with `pipelines` a list of
    `PipelineAttributes` only.

    Dagster lets every attribute that is not a string be a template too (`T | str`), and an
    optional one null. For `pipelines` such a union makes a misspelt field in one pipeline a
    failure of the whole list, which jsonschema (`dg check yaml`) reports at `pipelines:` as "not
    valid under any of the given schemas"; against a plain list it is reported at its own line.
    """
    return create_model(
        derived.__name__,
        __base__=derived,
        pipelines=(
            # A class made at import is no type to mypy; pydantic only needs it at runtime.
            list[PipelineAttributes],  # type: ignore[valid-type]
            Field(default=None, description=PIPELINES_DESCRIPTION),
        ),
    )


class CdfPipelinesScaffolder(dg.Scaffolder):
    """Writes a `defs.yaml` with one example pipeline."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        dg.scaffold_component(request, SCAFFOLD_ATTRIBUTES)


@dg.scaffold_with(CdfPipelinesScaffolder)
class CdfPipelinesComponent(dg.Component, dg.Model, dg.Resolvable):
    """cdf_platform pipelines: silver Delta tables kept in step with their bronze tables through
    the change feed, with lag and replay-window checks and self-repair."""

    # The YAML schema of `pipelines` is `model()`'s; as an attribute it holds plain dicts.
    pipelines: Annotated[list[dict[str, Any]] | None, dg.Resolver(_declared_pipelines)] = Field(
        default=None, description=PIPELINES_DESCRIPTION
    )
    pipelines_file: str | None = Field(
        default=None,
        description="A pipelines YAML file instead of `pipelines` (relative: to this defs.yaml).",
    )
    lake_root: str | None = Field(
        default=None,
        description="Where relative `source`/`target` locations live (default: $CDF_LAKE_ROOT, "
        "else ./lake).",
    )
    control_root: str | None = Field(
        default=None,
        description="Folder of the control tables (default: $CDF_CONTROL_ROOT, else "
        "<lake_root>/_control).",
    )
    alerts: dict[str, Any] | None = Field(
        default=None,
        description="Where alerts go and which events go where: `targets` (slack, webhook, "
        "email), `routes`, `ui_url` (docs/production.md, Alerts); `{env: NAME}` for secrets. "
        "With `pipelines_file`, its `alerts:` section may say it instead.",
    )
    automation: bool | None = Field(
        default=None,
        description="Start the incremental and rebuild sensors and the checks schedule RUNNING "
        "(default: $CDF_AUTOMATION, on unless `off`).",
    )

    @classmethod
    def model(cls) -> type[BaseModel]:
        """The schema of the attributes in `defs.yaml` (what `dg check yaml` checks): made at
        each call from the schema Dagster derives (well under a millisecond; Dagster asks for
        it once per load of a component, and validates with the class it is given)."""
        return _with_typed_pipelines(super().model())

    def _specs(self, folder: Path, lake: Lake) -> list[PipelineSpec]:
        origin = str(folder / "defs.yaml")
        if (self.pipelines is None) == (self.pipelines_file is None):
            raise InvalidPipelineSpec(
                f"{origin} sets {'both' if self.pipelines else 'neither'} of `pipelines` and "
                "`pipelines_file`",
                action="list the pipelines under `pipelines:` or name a file in "
                "`pipelines_file:`, not both",
            )
        if self.pipelines_file is not None:
            file = folder / self.pipelines_file
            return load_specs(file, lake_root=lake.lake_root, parsed=lake.parsed)
        specs = parse_specs({"pipelines": self.pipelines}, origin=origin)
        return [spec.resolved(lake.lake_root) for spec in specs]

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The platform's definitions for these pipelines.

        Raises:
            InvalidPipelineSpec: a pipeline is invalid, or both or neither of `pipelines` and
                `pipelines_file` are set.
            InvalidAlertConfig: `alerts` is malformed, or set both here and in the file.
        """
        environment = LakeLayout.from_environment()
        file = str(Path(context.path) / self.pipelines_file) if self.pipelines_file else None
        lake = LakeLayout(
            lake_root=self.lake_root or environment.lake_root,
            control_root=self.control_root or environment.control_root,
            pipelines_file=file,
        )
        resolved = lake.lake()
        specs = self._specs(Path(context.path), resolved)
        automation = default_automation() if self.automation is None else self.automation
        alerts = self._alerts(Path(context.path), resolved.parsed)
        return platform_defs(specs, lake, automation=automation, alerts=alerts)

    def _alerts(self, folder: Path, parsed: ParsedFiles) -> AlertConfig | None:
        from_file = (
            load_alerts(folder / self.pipelines_file, parsed=parsed)
            if self.pipelines_file
            else None
        )
        if self.alerts is not None and from_file is not None:
            raise InvalidAlertConfig(
                f"{folder / 'defs.yaml'} sets `alerts` and its pipelines file "
                f"{self.pipelines_file} has an `alerts:` section too",
                action="keep one of the two",
            )
        if self.alerts is not None:
            return AlertConfig.parse(self.alerts, origin=str(folder / "defs.yaml"))
        return from_file
