"""The pipeline spec: its fields, modes, event log, expectations; the pipelines file; its
fingerprint."""
