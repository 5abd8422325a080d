"""KIP-601 setup timeouts as the Java client computes them: min(max, base * 2^failures * U(0.8, 1.2))."""

from __future__ import annotations

import random

import pytest

from streaming.tools.simulate.kip601 import setup_timeout_ms, setup_timeout_range

# (case, failures before the attempt, base, max, expected inclusive range, why)
RANGE_CASES = [
    (1, 0, 10_000, 30_000, (8_000, 12_000), "the first attempt: base +-20%"),
    (2, 1, 10_000, 30_000, (16_000, 24_000), "one failure doubles it"),
    (3, 2, 10_000, 30_000, (30_000, 30_000), "40 s nominal is capped at the max"),
    (4, 1, 10_000, 20_000, (16_000, 20_000), "the cap cuts only the top of the jitter"),
    (5, 3, 10_000, 127_000, (64_000, 96_000), "the proposal's 127 s max leaves room to grow"),
    (6, 100, 10_000, 30_000, (30_000, 30_000), "any number of failures stays at the max"),
]


@pytest.mark.parametrize("case,failures,base,ceiling,expected,why", RANGE_CASES, ids=[f"case{c[0]}" for c in RANGE_CASES])
def test_range(case, failures, base, ceiling, expected, why):
    assert setup_timeout_range(failures, base, ceiling) == expected, f"case {case}: {why}"


@pytest.mark.parametrize("failures", range(5))
def test_samples_stay_in_range_and_use_the_jitter(failures):
    rng = random.Random(failures)
    samples = [setup_timeout_ms(failures, 10_000, 127_000, rng) for _ in range(2000)]
    low, high = setup_timeout_range(failures, 10_000, 127_000)
    assert all(low <= s <= high for s in samples)
    spread = (high - low) or 1
    assert min(samples) < low + spread * 0.05 and max(samples) > high - spread * 0.05
