"""Gold: Dagster-free consumers of silver's own change feed (plain PySpark + Delta)."""
