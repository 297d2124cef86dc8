"""The Spark settings a run changes for its own steps, in one place. Each switch and its conf
lives in `cdf_platform.spark.runtime.small_steps`; this says which step of a run takes which:

- the whole incremental run of a small change set runs on a fixed plan (`fixed_plan`);
- the run's small reads (the change set and silver's log state, the key filter, the commit's
  counts) run without generated code (`interpreted`);
- a small change set's MERGE runs interpreted too, and into a small silver rewrites the files it
  touches instead of writing deletion vectors (`interpreted_merge`, `copy_on_write_merge`).

Example:
    >>> tuning = RunTuning.of(spark, plan)  # doctest: +SKIP
    >>> with tuning.run(), tuning.small_reads():  # doctest: +SKIP
    ...     collapsed = collapse_changes(...)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdf_platform.spark.runtime.small_steps import (
    TableState,
    copy_on_write_merge,
    fixed_plan,
    interpreted,
    interpreted_merge,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from cdf_platform.planning.plan import RunPlan


@dataclass(frozen=True)
class RunTuning:
    """The tuning of one run's Spark steps (module doc).

    Attributes:
        spark: The run's session.
        change_bytes: The size of the change set's files (None: unknown).
        small: Whether the run is a small incremental one (`RunPlan.is_small_incremental`).
    """

    spark: SparkSession
    change_bytes: int | None
    small: bool

    @classmethod
    def of(cls, spark: SparkSession, plan: RunPlan) -> RunTuning:
        return cls(spark, plan.change_bytes(), plan.is_small_incremental())

    def run(self) -> AbstractContextManager[None]:
        """The settings of the whole incremental run."""
        return fixed_plan(self.spark, self.change_bytes)

    def small_reads(self) -> AbstractContextManager[None]:
        """The settings of a read of something small."""
        return interpreted(self.spark)

    @contextmanager
    def merge(self, silver: TableState) -> Iterator[None]:
        """The settings of the MERGE into `silver` (its log state)."""
        if not self.small:
            yield
            return
        with interpreted_merge(self.spark, silver), copy_on_write_merge(self.spark, silver):
            yield
