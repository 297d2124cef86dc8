"""A Dagster project declaring cdf_platform pipelines as a Component (see defs/pipelines)."""
