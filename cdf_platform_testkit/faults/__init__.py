"""Generated bronze histories, their oracles and the harness that runs the platform on them
(with a gold consumer), shared by the fault tests (`cdf_platform_tests/faults/`) and the fuzz
benchmark (`bench/fuzz.py`)."""
