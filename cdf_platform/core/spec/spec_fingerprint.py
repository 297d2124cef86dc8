"""The spec silver was built under: a fingerprint of every field that shapes silver's rows, and
what a change of those fields asks of the next run (docs/design.md section 3a).

Each row-shaping field gets a short hash of its canonical value (a `transform` the hash of its
function's code as well as its name); the fingerprint is the hash of those. Silver's commits carry
the per-field hashes in their `userMetadata` (`cdf_platform.state.watermark`), so the next plan
names the fields that differ without keeping the old spec anywhere else. Fields that shape
nothing (lag and headroom limits, `fallback_mode`, `on_spec_change`, the bronze asset's name, the
locations) are not part of it.

What a change does depends on the fields (`SpecChange.reshapes`):

- `where`, `columns`, `transform`, `include_columns`, `exclude_columns`, `ignore_null_updates`,
  `sequence_by`, the SCD2 track lists, `deletion_vectors`, `changes` and `events` alter
  existing rows (or silver's storage) but not its shape: silver is reconciled with a pinned
  snapshot under the new spec;
- `keys`, `history` and `delete_mode` change what a silver row *is*: silver is rewritten in the
  new shape from a pinned snapshot, or refused where that is not well defined; never a MERGE
  on other keys.

Example:
    >>> spec = PipelineSpec(id="orders", source="b", target="s", keys=["id"])
    >>> record = spec_record(spec)
    >>> changed = spec.model_copy(update={"where": "status != 'TEST'"})
    >>> compare_spec(record, spec_record(changed)).fields
    ('where',)
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import CodeType, MappingProxyType
from typing import Any

from cdf_platform.core.errors import FIX_SPEC_FIELD, InvalidPipelineSpec
from cdf_platform.core.spec.pipeline_spec import PipelineSpec

# Fields whose change rewrites silver in a new shape (a row is identified or kept otherwise).
RESHAPING_FIELDS = ("keys", "history", "delete_mode")
# Fields whose change alters existing rows' values or membership, reconciled in place.
RECONCILED_FIELDS = (
    "where",
    "columns",
    "transform",
    "include_columns",
    "exclude_columns",
    "ignore_null_updates",
    "sequence_by",
    "track_history_columns",
    "track_history_except_columns",
    "deletion_vectors",
    "changes",
    "events",
    "expectations",
)
SHAPING_FIELDS = RESHAPING_FIELDS + RECONCILED_FIELDS
# Fields a record holds only when they are not at their default: a spec that leaves them unset
# keeps the fingerprint (and Dagster code version) it had before they existed.
OPTIONAL_FIELDS = frozenset({"changes", "events", "expectations"})
# Fields whose change makes a reconcile write the snapshot's values as they are: silver's rows
# were kept by another rule (a NULL update keeping a value, a later sequence value kept), or
# come from another kind of source.
EXACT_FIELDS = frozenset({"ignore_null_updates", "sequence_by", "changes", "events"})
_TRANSFORM_ACTION = FIX_SPEC_FIELD


def _digest(value: object, length: int) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def import_transform(spec: PipelineSpec) -> Callable[..., Any] | None:
    """The Python function `spec.transform` names, imported; None without one.

    Raises:
        InvalidPipelineSpec: the module cannot be imported, or has no such callable.
    """
    if spec.transform is None:
        return None
    module_name, _, function_name = spec.transform.partition(":")

    def invalid(problem: str) -> InvalidPipelineSpec:
        return InvalidPipelineSpec(
            problem, pipeline_id=spec.id, table=spec.source, action=_TRANSFORM_ACTION
        )

    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise invalid(f"transform {spec.transform!r}: cannot import {module_name}: {err}") from err
    function = getattr(module, function_name, None)
    if not callable(function):
        raise invalid(
            f"transform {spec.transform!r}: {module_name} has no function {function_name}"
        )
    return function


def _code_identity(code: CodeType) -> list[Any]:
    """What a code object computes, without where it sits (file, line numbers)."""
    consts = [_code_identity(c) if isinstance(c, CodeType) else repr(c) for c in code.co_consts]
    return [code.co_code.hex(), consts, list(code.co_names), list(code.co_varnames)]


def transform_code(function: Callable[..., Any]) -> str:
    """A hash of `function`'s code: its source where Python can find it, else its code object
    (bytecode, constants and names; nested functions included)."""
    try:
        return _digest(inspect.getsource(function), 16)
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        if code is None:  # a callable object: its class's call method
            code = getattr(type(function).__call__, "__code__", None)
        return _digest(_code_identity(code) if code is not None else repr(function), 16)


def _shaping_values(spec: PipelineSpec) -> dict[str, Any]:
    """The row-shaping fields of `spec` as JSON values. Order matters for `columns` (each sees
    the ones before it): they are a list of pairs, which no key sorting reorders."""
    values = spec.model_dump(mode="json", include=set(SHAPING_FIELDS))
    values["columns"] = list(spec.columns.items())
    # Only the rules that keep rows out shape silver (`warn` and `fail` rules write nothing).
    values["expectations"] = sorted(
        [e.name, e.rule, e.action.value] for e in spec.expectations if e.shapes_rows
    )
    return values


def spec_record(spec: PipelineSpec) -> dict[str, str]:
    """Field name -> a short hash of its value, for every field that shapes silver's rows.

    Raises:
        InvalidPipelineSpec: `transform` names a function that cannot be imported.
    """
    values = _shaping_values(spec)
    function = import_transform(spec)
    if function is not None:
        values["transform"] = [spec.transform, transform_code(function)]
    return {
        name: _digest(values[name], 12)
        for name in SHAPING_FIELDS
        if name not in OPTIONAL_FIELDS or _set(spec, name, values)
    }


def fingerprint_of(record: Mapping[str, str]) -> str:
    """The fingerprint of a spec record (`spec_record`): 16 hex digits."""
    return _digest(dict(record), 16)


def spec_fingerprint(spec: PipelineSpec) -> str:
    """The fingerprint of `spec`'s row-shaping fields (silver's Dagster code version)."""
    return fingerprint_of(spec_record(spec))


def shaping_fields(spec: PipelineSpec) -> str:
    """The row-shaping fields of `spec` as JSON (what the load log keeps of the spec a run
    wrote under)."""
    return json.dumps(_shaping_values(spec), sort_keys=True)


@dataclass(frozen=True)
class SpecChange:
    """How the current spec differs from the one silver records.

    Attributes:
        fields: The row-shaping fields that differ, in `SHAPING_FIELDS` order.
        recorded: The fingerprint silver records.
        current: The fingerprint of the current spec.
    """

    fields: tuple[str, ...]
    recorded: str
    current: str

    @property
    def reshapes(self) -> bool:
        """Whether a field that identifies or keeps rows changed (keys, history, delete mode):
        silver must be rewritten in the new shape, never merged on other keys."""
        return any(name in RESHAPING_FIELDS for name in self.fields)

    def describe(self) -> str:
        """One line: which fields changed, and the two fingerprints."""
        return (
            f"the pipeline's {', '.join(self.fields)} changed since silver was written "
            f"(spec fingerprint {self.recorded} -> {self.current})"
        )


def compare_spec(
    recorded: Mapping[str, str] | None, current: Mapping[str, str]
) -> SpecChange | None:
    """The change from the `recorded` spec record to `current`, or None when they agree (or
    nothing is recorded: silver written before records were kept adopts the current spec).

    A field the record lacks counts as unchanged when its current value is the field's
    default: a record written before the field existed described silver without it.
    """
    if not recorded:
        return None
    defaults = _DEFAULT_RECORD
    fields = tuple(
        name
        for name in SHAPING_FIELDS
        if recorded.get(name, defaults.get(name)) != current.get(name, defaults.get(name))
    )
    if not fields:
        return None
    return SpecChange(fields, fingerprint_of(recorded), fingerprint_of(current))


def _set(spec: PipelineSpec, name: str, values: Mapping[str, Any]) -> bool:
    """Whether the optional field `name` shapes anything in `spec` (not its default; for
    `expectations`, a rule that keeps rows out)."""
    if name == "expectations":
        return bool(values[name])
    return bool(getattr(spec, name) != PipelineSpec.model_fields[name].get_default())


# The record of a spec that sets no optional field (what a record lacking a field means): a
# constant of the spec's defaults, made once when the module loads (a tenth of a millisecond)
# rather than for each comparison.
_DEFAULT_RECORD: Mapping[str, str] = MappingProxyType(
    spec_record(PipelineSpec(id="defaults", source="source", target="target", keys=["k"]))
)
