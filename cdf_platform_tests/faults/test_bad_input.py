"""Every row of the bad-input catalogue: the error class, a message that names the fix, and
nothing written (silver absent or unchanged, watermark and control state unchanged)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from cdf_platform.core.errors import DataQualityError
from cdf_platform.state.watermark import read_silver_state
from cdf_platform_tests.faults.catalogue import (
    CATALOGUE,
    PIPELINE_ID,
    BadInput,
    BadInputLake,
    readme_table,
)


def _written(lake: BadInputLake) -> tuple[Any, ...]:
    """What a refused input must leave untouched."""
    state = read_silver_state(lake.silver, PIPELINE_ID)
    silver = Path(lake.silver)
    files = sorted(str(p.relative_to(silver)) for p in silver.rglob("*")) if silver.exists() else []
    control = lake.control.read_states().get(PIPELINE_ID)
    return (state.silver_version, state.watermark, state.generation, files, control)


def test_catalogue_has_at_least_twenty_distinct_cases() -> None:
    assert len(CATALOGUE) >= 20
    assert len({case.case for case in CATALOGUE}) == len(CATALOGUE)


def test_readme_lists_the_catalogue_as_tested() -> None:
    """The documented table (docs/testing.md) is the catalogue's
    (`python -m cdf_platform_tests.faults.catalogue`)."""
    page = (Path(__file__).parents[2] / "docs" / "testing.md").read_text()
    assert readme_table() in page


CASES = [pytest.param(case, id=case.case) for case in CATALOGUE]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_with_its_fix_and_nothing_written(
    case: BadInput, lake: Path, request: pytest.FixtureRequest
) -> None:
    spark = request.getfixturevalue("spark") if case.spark else None
    bad = BadInputLake(lake, spark)
    case.setup(bad)
    before = _written(bad)

    with pytest.raises(case.error) as caught:
        case.act(bad)

    assert type(caught.value) is case.error
    message = str(caught.value)
    assert "What to do:" in message
    assert case.fix in message.split("What to do:", 1)[1], message
    assert _written(bad) == before


def test_a_refused_initial_load_is_logged_as_an_incident(spark: SparkSession, lake: Path) -> None:
    bad = BadInputLake(lake, spark)
    bad.make_bronze([{"id": None, "name": "nobody", "amount": 0}])
    with pytest.raises(DataQualityError):
        bad.run()
    log = bad.control.read_log(PIPELINE_ID)
    assert [(r["outcome"], r["incident_code"]) for r in log] == [("FAILED", "DATA_QUALITY")]
