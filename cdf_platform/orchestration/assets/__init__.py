"""Assets: one silver asset per pipeline, external bronze, the all-pipelines overview."""
