"""The benchmark's ratio intervals: a paired percentile bootstrap over interleaved rounds."""

from __future__ import annotations

import random

from bench.report import paired_ratio_interval, ratio_figure


def test_a_ratio_that_holds_in_every_round_has_no_width_whatever_the_drift() -> None:
    # The machine slows down round after round, both methods alike: the ratio is exactly 0.8.
    denominator = [3.0 + 0.5 * r for r in range(7)]
    numerator = [0.8 * d for d in denominator]
    low, high = paired_ratio_interval(numerator, denominator)
    assert abs(low - 0.8) < 1e-9 and abs(high - 0.8) < 1e-9


def test_noise_widens_the_interval_around_the_ratio_of_medians() -> None:
    draw = random.Random(7)
    denominator = [4.0 + draw.uniform(-0.6, 0.6) for _ in range(7)]
    numerator = [4.2 + draw.uniform(-0.6, 0.6) for _ in range(7)]
    figure = ratio_figure("(b)", numerator, denominator, 1.05)
    assert figure.interval is not None and figure.value is not None
    low, high = figure.interval
    assert low < figure.value < high
    assert high - low > 0.05
    # More rounds of the same noise narrow it.
    wide = high - low
    denominator = [4.0 + draw.uniform(-0.6, 0.6) for _ in range(70)]
    numerator = [4.2 + draw.uniform(-0.6, 0.6) for _ in range(70)]
    low, high = paired_ratio_interval(numerator, denominator)
    assert high - low < wide / 2


def test_the_verdict_names_where_the_interval_lies() -> None:
    within = ratio_figure("(c)", [0.8, 0.82, 0.79], [1.0, 1.01, 0.99], 0.9)
    assert within.met and "whole interval within the target" in within.detail
    missed = ratio_figure("(c)", [1.2, 1.25, 1.22], [1.0, 1.01, 0.99], 0.9)
    assert not missed.met and "whole interval misses the target" in missed.detail
    assert missed.measured.startswith("1.22 [")
