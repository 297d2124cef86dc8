"""The pipeline spec: its fields, event log, expectations; the pipelines file; its fingerprint."""
