"""EventSpec: how a row of a change-event log reads (`changes: events` in a pipeline spec):
which expression gives its operation, which operation values upsert, delete or truncate, and
which expression gives the row image.

Example:
    >>> EventSpec(operation="Op", upserts=["I", "U"], deletes=["D"]).row is None
    True
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class EventSpec(BaseModel):
    """How an event row of a change-event log reads (`changes: events`).

    Example:
        >>> debezium = EventSpec(operation="op", upserts=["c", "u", "r"], deletes=["d"],
        ...                      row="coalesce(after, before)")
        >>> debezium.tombstone_retention_hours
        168.0
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    operation: str = Field(
        description="The event's operation: a Spark SQL expression over the event row (a "
        "column, e.g. `op`), compared as a string with the values below."
    )
    upserts: list[str] = Field(
        min_length=1,
        description="Operation values that insert or update the key (Debezium: `c`, `u`, `r`; "
        "DMS: `I`, `U`).",
    )
    deletes: list[str] = Field(
        default_factory=list,
        description="Operation values that delete the key (Debezium: `d`; DMS: `D`). Any value "
        "in neither list, or NULL, is refused as a data error.",
    )
    truncates: list[str] = Field(
        default_factory=list,
        description="Operation values that empty the source table (`history: scd1` only): "
        "every silver row whose `sequence_by` value is not newer than the truncate's leaves "
        "silver (hard or soft), and older events arriving later are ignored.",
    )
    row: str | None = Field(
        default=None,
        description="The row image: a Spark SQL expression giving a struct whose fields are "
        "silver's columns (Debezium: `coalesce(after, before)`: a delete carries its key in "
        "`before`). Default: the event's own columns, `exclude_columns` leaving the operation "
        "and metadata out.",
    )
    tombstone_retention_hours: float = Field(
        default=168.0,
        gt=0,
        description="`history: scd1`: how long a deleted key's tombstone "
        "(its delete's sequence value) is kept so an older event arriving later cannot bring "
        "the key back.",
    )

    @field_validator("operation", "row")
    @classmethod
    def _check_expression(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an events expression is empty")
        return value

    @model_validator(mode="after")
    def _check_values(self) -> EventSpec:
        lists = {"upserts": self.upserts, "deletes": self.deletes, "truncates": self.truncates}
        for name, values in lists.items():
            if len(set(values)) != len(values):
                raise ValueError(f"events.{name} lists a value twice: {values}")
        seen: dict[str, str] = {}
        for name, values in lists.items():
            for value in values:
                if value in seen:
                    raise ValueError(
                        f"operation value {value!r} is in both events.{seen[value]} and "
                        f"events.{name}"
                    )
                seen[value] = name
        return self
