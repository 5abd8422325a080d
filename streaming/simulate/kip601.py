"""KIP-601 connection setup timeouts, as the Java client computes them.

``ClusterConnectionStates`` asks an ``ExponentialBackoff(base, 2, max, jitter=0.2)`` for
``failures`` = the failures of that node before this attempt, so the n-th consecutive attempt
waits ``min(max, base * 2^(n-1) * uniform(0.8, 1.2))`` (truncated to whole milliseconds).
"""

from __future__ import annotations

import random

JITTER = 0.2


def setup_timeout_ms(failures_before: int, base_ms: int, max_ms: int, rng: random.Random) -> int:
    nominal = base_ms * 2 ** min(failures_before, 40)
    return min(max_ms, int(nominal * rng.uniform(1 - JITTER, 1 + JITTER)))


def setup_timeout_range(failures_before: int, base_ms: int, max_ms: int) -> tuple[int, int]:
    """Inclusive bounds of :func:`setup_timeout_ms` for that many failures before the attempt."""
    nominal = base_ms * 2 ** min(failures_before, 40)
    return min(max_ms, int(nominal * (1 - JITTER))), min(max_ms, int(nominal * (1 + JITTER)))
