"""The fuzz benchmark's histories: every one ends with silver equal to its oracle."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from bench.fuzz import run_seeds


@pytest.mark.slow
def test_many_generated_histories(spark: SparkSession, tmp_path: Path) -> None:
    """`pytest -m slow`: CDF_FUZZ_SEEDS histories (default 50) with the fuzz profile."""
    count = int(os.environ.get("CDF_FUZZ_SEEDS", "50"))
    summary = run_seeds(spark, tmp_path, range(1000, 1000 + count))
    assert summary["divergences"] == 0
    assert summary["silent_losses"] == 0
    assert summary["harness_errors"] == 0
