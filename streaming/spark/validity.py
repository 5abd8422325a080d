"""What no real cluster can send, refused before it reaches any state: one forged event must not
poison a cluster's state for good (the reasons: streaming.rules.validity, which describes every
refusal).

These stateless checks run in routing, over a batch's Arrow columns, before the batch's clock is
taken (a year-3000 event time would otherwise move the watermark): event times far in the future
or the past, incarnations and metadata epochs beyond ``rules.event.max.epoch``.

The clock: the live job compares event times with the wall clock; replay (event time) with the
batch's own times, since a recording may be from any date: there an event is too far ahead (or
behind) when a gap of more than the limit separates it from the bulk of its batch, with at most
one in a thousand of the batch's events (at least one) beyond the gap. A batch of one event has
nothing to be compared with.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streaming.rules.validity import EPOCH_FIELDS, FUTURE, PAST, VALUE
from streaming.times import utc_text


@dataclass(frozen=True)
class Limits:
    """The stateless limits (RuleSettings has them under their config names)."""

    max_future_ms: int = 300_000
    max_past_ms: int = 604_800_000
    max_epoch: int = 2**53
    wall_clock: bool = True  # False: event time, the batch's own times are the clock

    @classmethod
    def of(cls, rules, wall_clock: bool) -> "Limits":
        return cls(rules.max_future_ms, rules.max_past_ms, rules.max_epoch, wall_clock)


def refusals(table: pa.Table, event_ms: pa.ChunkedArray, decoded: np.ndarray, limits: Limits,
             now_ms: int) -> dict[int, tuple[str, str]]:
    """Row -> (reason, detail) of each decoded row (``decoded``) that is implausible. ``now_ms``
    is the clock of a wall-clock check."""
    ms = pc.fill_null(event_ms, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    dated = decoded & ~pc.is_null(event_ms).to_numpy(zero_copy_only=False) & (ms >= 0)  # before 1970: routing's
    if limits.wall_clock:
        high, low, clock = now_ms + limits.max_future_ms, now_ms - limits.max_past_ms, "the clock"
    else:
        high, low = bulk_bounds(ms[dated], limits.max_future_ms, limits.max_past_ms)
        clock = "the rest of its batch"
    found: dict[int, tuple[str, str]] = {}
    for row in np.flatnonzero(dated & (ms > high)).tolist():
        found[row] = (FUTURE, f"event_time {utc_text(ms[row])} is more than {limits.max_future_ms} ms ahead of {clock}")
    for row in np.flatnonzero(dated & (ms < low)).tolist():
        found[row] = (PAST, f"event_time {utc_text(ms[row])} is more than {limits.max_past_ms} ms behind {clock}")
    for name in EPOCH_FIELDS:
        if name not in table.column_names:
            continue
        values = pc.fill_null(table.column(name), 0).to_numpy(zero_copy_only=False)
        for row in np.flatnonzero(decoded & (values > limits.max_epoch)).tolist():
            found.setdefault(row, (VALUE, f"{name} {values[row]} is above rules.event.max.epoch={limits.max_epoch}"))
    return found


def bulk_bounds(times: np.ndarray, max_future_ms: int, max_past_ms: int) -> tuple[float, float]:
    """(newest, oldest) time an event of the batch may have when the batch is its own clock: the
    edges of its bulk, beyond which at most max(1, n // 1000) events lie across a gap wider than
    the limit (module docstring). Infinite when nothing stands apart."""
    high, low = np.inf, -np.inf
    t = np.sort(times)
    few = max(1, len(t) // 1000)
    if len(t) >= 2:
        start = max(0, len(t) - 1 - few)
        wide = np.flatnonzero(np.diff(t[start:]) > max_future_ms)
        if len(wide):
            high = t[start + wide[0]]
            t = t[:start + wide[0] + 1]
    if len(t) >= 2:
        wide = np.flatnonzero(np.diff(t[:few + 1]) > max_past_ms)
        if len(wide):
            low = t[wide[-1] + 1]
    return high, low
