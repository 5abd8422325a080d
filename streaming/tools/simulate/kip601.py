"""KIP-601 connection setup timeouts, as the Java client computes them.

``ClusterConnectionStates`` asks an ``ExponentialBackoff(base, 2, max, jitter=0.2)`` for
``failures`` = the failures of that node before this attempt, so the n-th consecutive attempt
waits ``min(max, base * 2^(n-1) * uniform(0.8, 1.2))`` (truncated to whole milliseconds).
"""

from __future__ import annotations

import random

from streaming.rules.nodes import JITTER_HIGH, JITTER_LOW, nominal_setup_timeout_ms, setup_timeout_bounds


def setup_timeout_ms(failures_before: int, base_ms: int, max_ms: int, rng: random.Random) -> int:
    nominal = nominal_setup_timeout_ms(failures_before, base_ms)
    return min(max_ms, int(nominal * rng.uniform(JITTER_LOW, JITTER_HIGH)))


def setup_timeout_range(failures_before: int, base_ms: int, max_ms: int) -> tuple[int, int]:
    """Inclusive bounds of :func:`setup_timeout_ms` for that many failures before the attempt: the
    rules' bounds (streaming.rules.nodes), truncated to whole milliseconds as the draws are."""
    low, high = setup_timeout_bounds(failures_before, base_ms, max_ms)
    return int(low), int(high)
