"""The pipelines file: YAML -> validated `PipelineSpec`s
(`cdf_platform.core.spec.pipeline_spec`), with ids unique and one pipeline per target, its
optional `storage:` section (object-store options per location prefix,
`cdf_platform.core.storage`) and `alerts:` section (where alerts go,
`cdf_platform.core.alert_config`).

`pipelines.yaml` by default, `$CDF_PIPELINES_FILE` or an explicit path otherwise.

Example:
    >>> specs = load_specs("pipelines.yaml", lake_root="/lake")  # doctest: +SKIP
    >>> find_spec(specs, "orders").keys  # doctest: +SKIP
    ['order_id']
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from cdf_platform.core.alert_config import AlertConfig
from cdf_platform.core.config import PIPELINES_FILE_ENV, LakeEnvironment
from cdf_platform.core.errors import FIX_SPEC_FIELD, InvalidPipelineSpec, TargetOwnershipConflict
from cdf_platform.core.spec.pipeline_spec import PipelineSpec
from cdf_platform.core.storage import StorageConfig

# The top-level sections of a pipelines file.
SECTIONS = ("pipelines", "storage", "alerts")


def _describe(err: ValidationError) -> str:
    parts = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"])
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def parse_specs(document: Any, *, origin: str = "<config>") -> list[PipelineSpec]:
    """Validate a parsed pipelines document (`{"pipelines": [...]}`, optionally `storage:`,
    which `parse_storage` returns) and return its pipelines.

    Raises:
        InvalidPipelineSpec: the document or a spec is malformed, or ids repeat.
        InvalidStorageConfig: the `storage:` section is malformed.
        TargetOwnershipConflict: two pipelines write the same target.
    """
    if not isinstance(document, dict) or not isinstance(document.get("pipelines"), list):
        raise InvalidPipelineSpec(
            f"{origin} must be a mapping with a `pipelines:` list",
            action="start the file with `pipelines:` and one `- id: ...` entry per pipeline",
        )
    unknown = set(document) - set(SECTIONS)
    if unknown:
        raise InvalidPipelineSpec(f"{origin} has unknown top-level keys {sorted(unknown)}")
    # A malformed section fails wherever the file is read.
    parse_storage(document, origin=origin)
    parse_alerts(document, origin=origin)
    specs: list[PipelineSpec] = []
    for index, raw in enumerate(document["pipelines"]):
        name = raw.get("id", f"#{index}") if isinstance(raw, dict) else f"#{index}"
        try:
            specs.append(PipelineSpec.model_validate(raw))
        except ValidationError as err:
            raise InvalidPipelineSpec(
                f"{origin}, pipeline {name}: {_describe(err)}",
                pipeline_id=str(name),
                action=FIX_SPEC_FIELD,
            ) from err
    seen: dict[str, PipelineSpec] = {}
    targets: dict[str, str] = {}
    for spec in specs:
        if spec.id in seen:
            raise InvalidPipelineSpec(f"{origin}: pipeline id {spec.id!r} appears twice")
        seen[spec.id] = spec
        target = spec.target.rstrip("/")
        if target in targets:
            raise TargetOwnershipConflict(
                f"{origin}: pipelines {targets[target]!r} and {spec.id!r} both write {target}",
                pipeline_id=spec.id,
                table=target,
            )
        targets[target] = spec.id
    return specs


# libyaml's safe loader where PyYAML was built with it (its wheels are): the same documents and
# errors, parsed several times faster (a fleet's pipelines file is read by every process).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse(text: str, file: Path) -> Any:
    """The YAML document of `text`, read from `file`.

    Raises:
        InvalidPipelineSpec: it is not YAML.
    """
    try:
        return yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as err:
        raise InvalidPipelineSpec(
            f"{file} is not valid YAML: {err}", action="fix the YAML syntax at the line shown"
        ) from err


class ParsedFiles:
    """The last document parsed from each pipelines file, with the text it was parsed from.

    Whoever reads a file several times holds one and passes it to `load_specs`,
    `load_storage` and `load_alerts`: the file is read each time, its text parsed once. A
    `Lake` holds one (it reads its file's storage section, pipelines and alerts), and so does
    the definitions' `lake` resource, whose copies for each run and sensor tick share it
    (`LakeLayout`): a fleet's file is parsed once per text in a code server or a run process.
    Readers only read the document (`parse_specs`, `parse_storage` copy what they keep).

    Example:
        >>> parsed = ParsedFiles()
        >>> specs = load_specs("pipelines.yaml", parsed=parsed)  # doctest: +SKIP
        >>> storage = load_storage("pipelines.yaml", parsed=parsed)  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._documents: dict[Path, tuple[str, Any]] = {}

    def document(self, file: Path, text: str) -> Any:
        """The YAML document of `text`, read from `file`: parsed unless it is the text last
        parsed for `file`.

        Raises:
            InvalidPipelineSpec: it is not YAML.
        """
        known = self._documents.get(file)
        if known is not None and known[0] == text:
            return known[1]
        document = _parse(text, file)
        self._documents[file] = (text, document)
        return document


def _read_document(path: str | Path | None, parsed: ParsedFiles | None) -> tuple[Any, Path]:
    """The parsed YAML of the pipelines file at `path` (default: `LakeEnvironment`'s), parsed
    through `parsed` when given.

    Raises:
        InvalidPipelineSpec: the file is missing or is not YAML.
    """
    file = Path(path if path is not None else LakeEnvironment.resolve().pipelines_file.value)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as err:
        raise InvalidPipelineSpec(
            f"cannot read pipelines file {file}: {err.strerror}",
            action=f"create {file} or point ${PIPELINES_FILE_ENV} at your pipelines file",
        ) from err
    document = parsed.document(file, text) if parsed is not None else _parse(text, file)
    return document, file


def load_specs(
    path: str | Path | None = None,
    *,
    lake_root: str | None = None,
    parsed: ParsedFiles | None = None,
) -> list[PipelineSpec]:
    """Load and validate the pipelines file; resolve relative locations under `lake_root`;
    `parsed`: the documents the caller keeps (`ParsedFiles`).

    Raises:
        InvalidPipelineSpec: the file is missing, is not YAML, or holds an invalid spec.
        InvalidStorageConfig: its `storage:` section is malformed.
        TargetOwnershipConflict: two pipelines write the same target.
    """
    document, file = _read_document(path, parsed)
    specs = parse_specs(document, origin=str(file))
    return [spec.resolved(lake_root) for spec in specs] if lake_root is not None else specs


def parse_storage(document: Any, *, origin: str = "<config>") -> StorageConfig:
    """The `storage:` section of a parsed pipelines document (empty when it has none).

    Raises:
        InvalidStorageConfig: the section is malformed (see `StorageConfig.parse`).
    """
    section = document.get("storage") if isinstance(document, dict) else None
    return StorageConfig.parse(section, origin=origin)


def load_storage(
    path: str | Path | None = None, *, parsed: ParsedFiles | None = None
) -> StorageConfig:
    """The `storage:` section of the pipelines file (its `{env: NAME}` values unread);
    `parsed`: the documents the caller keeps (`ParsedFiles`).

    Raises:
        InvalidPipelineSpec: the file is missing or is not YAML.
        InvalidStorageConfig: the section is malformed.
    """
    document, file = _read_document(path, parsed)
    return parse_storage(document, origin=str(file))


def parse_alerts(document: Any, *, origin: str = "<config>") -> AlertConfig | None:
    """The `alerts:` section of a parsed pipelines document (None when it has none).

    Raises:
        InvalidAlertConfig: the section is malformed (see `AlertConfig.parse`).
    """
    section = document.get("alerts") if isinstance(document, dict) else None
    return AlertConfig.parse(section, origin=origin)


def load_alerts(
    path: str | Path | None = None, *, parsed: ParsedFiles | None = None
) -> AlertConfig | None:
    """The `alerts:` section of the pipelines file (its `{env: NAME}` values unread);
    `parsed`: the documents the caller keeps (`ParsedFiles`).

    Raises:
        InvalidPipelineSpec: the file is missing or is not YAML.
        InvalidAlertConfig: the section is malformed.
    """
    document, file = _read_document(path, parsed)
    return parse_alerts(document, origin=str(file))


def find_spec(specs: list[PipelineSpec], pipeline_id: str) -> PipelineSpec:
    """The spec with `pipeline_id`.

    Raises:
        InvalidPipelineSpec: no such pipeline.
    """
    for spec in specs:
        if spec.id == pipeline_id:
            return spec
    raise InvalidPipelineSpec(
        f"no pipeline {pipeline_id!r}; known: {sorted(s.id for s in specs)}",
        pipeline_id=pipeline_id,
        action="use one of the ids in the pipelines file",
    )
