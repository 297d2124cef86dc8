"""The one Definitions entry point of cdf_platform (workspace.yaml and `dagster dev` load it)."""

from __future__ import annotations

import dagster as dg

from cdf_platform.assets.bronze import demo_bronze_assets
from cdf_platform.resources.spark import SparkResource

defs = dg.Definitions(
    assets=[*demo_bronze_assets],
    resources={"spark": SparkResource()},
    # PySpark DataFrames cannot be pickled between processes, and one SparkSession per process
    # is the unit of cost: Spark work runs in the run's own process.
    executor=dg.in_process_executor,
)
