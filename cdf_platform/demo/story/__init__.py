"""The outage story: its steps and what it reads back (tables' rows; runs and checks in Dagster)."""
