"""Correctness under faults: generated histories against a snapshot oracle, crash injection,
concurrency and the bad-input catalogue."""
