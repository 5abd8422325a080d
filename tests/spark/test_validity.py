"""What routing refuses before any state sees it (streaming.spark.validity): event times far ahead of
or behind the clock (the wall clock live, the batch's own times in replay) and epochs no cluster
reaches. Tables of numbered cases, each saying why."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from streaming.spark.replay import rows_to_batch
from streaming.spark.validity import Limits, bulk_bounds, refusals
from tests.support.builders import hb, response, update

NOW = 1_795_000_000_000
DAY = 86_400_000
LIMITS = Limits()  # 5 minutes ahead, 7 days behind, epochs up to 2^53


def refused(evs: list[dict], limits: Limits = LIMITS) -> dict[int, str]:
    table = pa.Table.from_batches([rows_to_batch(evs)])
    ms = pa.chunked_array([pa.array([ev["event_time"] for ev in evs], pa.int64())])
    return {row: reason for row, (reason, _) in refusals(table, ms, np.ones(len(evs), bool), limits, NOW).items()}


def at(ev: dict, t: int) -> dict:
    return {**ev, "event_time": t}


# (case, events, limits, refused rows -> reason, why)
WALL = [
    (1, [at(hb(0, 1), NOW + 299_000)], LIMITS, {}, "within the 5 minutes a producer's clock may run ahead"),
    (2, [at(hb(0, 1), NOW + 10**12)], LIMITS, {0: "future_event_time"}, "a broken clock 30 years ahead"),
    (3, [at(hb(0, 1), NOW - 6 * DAY)], LIMITS, {}, "a backlog of six days: the job was down, the topic kept it"),
    (4, [at(hb(0, 1), NOW - 8 * DAY)], LIMITS, {0: "past_event_time"},
     "older than Kafka's default retention: no real record of it can be in the topic"),
    (5, [at(hb(0, 1, inc=2**63 - 1), NOW)], LIMITS, {0: "implausible_value"}, "an incarnation near 2^63"),
    (6, [at(update(0, 1, 2**62), NOW), at(response(0, "a", 1, 2**53 + 1), NOW)], LIMITS,
     {0: "implausible_value", 1: "implausible_value"}, "metadata epochs beyond 2^53, of an update and of a response"),
    (7, [at(update(0, 1, 2**53), NOW)], LIMITS, {}, "2^53 itself is allowed"),
    (8, [at(hb(0, 1), NOW - 8 * DAY)], Limits(max_past_ms=30 * DAY), {}, "rules.event.max.past.ms raised"),
]


@pytest.mark.parametrize("case,evs,limits,expected,why", WALL, ids=[f"case{c[0]}" for c in WALL])
def test_wall_clock_refusals(case, evs, limits, expected, why):
    assert refused(evs, limits) == expected, f"case {case}: {why}"


REPLAY = Limits(wall_clock=False)
RECORDING = 1_900_000_000_000  # 2030: a replayed recording may be of any date


def recording(n: int, start: int = RECORDING, every: int = 100) -> list[dict]:
    return [at(hb(0, 1 + i % 3), start + i * every) for i in range(n)]


# (case, events, refused rows -> reason, why)
BATCH_CLOCK = [
    (1, recording(500), {}, "a recording of any date is its own clock: nothing is refused"),
    (2, recording(500) + [at(hb(0, 1), RECORDING + 10**12)], {500: "future_event_time"},
     "one record 30 years after the rest stands apart from its batch"),
    (3, recording(500) + [at(hb(0, 1), RECORDING - 10**12)], {500: "past_event_time"},
     "and one 30 years before it"),
    (4, recording(250) + recording(250, start=RECORDING + 3_600_000), {},
     "an hour without events in the middle of a recording is a gap, not a forgery: half the batch is after it"),
    (5, [at(hb(0, 1), RECORDING), at(hb(0, 2), RECORDING + 10**12)], {1: "future_event_time"},
     "two events: the later one cannot be the clock"),
    (6, [at(hb(0, 1), RECORDING + 10**12)], {}, "a batch of one has nothing to be compared with"),
]


@pytest.mark.parametrize("case,evs,expected,why", BATCH_CLOCK, ids=[f"case{c[0]}" for c in BATCH_CLOCK])
def test_the_batch_is_its_own_clock_in_event_time(case, evs, expected, why):
    assert refused(evs, REPLAY) == expected, f"case {case}: {why}"


def test_at_most_one_in_a_thousand_stand_apart():
    """Why: more events than that beyond a gap are a part of the stream (a recording resumed
    after a pause), not a few forged records."""
    times = np.r_[np.arange(2000) * 100, 10**9 + np.arange(2)]
    assert bulk_bounds(times, 300_000, 604_800_000) == (199_900, -np.inf)
    times = np.r_[np.arange(2000) * 100, 10**9 + np.arange(3)]
    assert bulk_bounds(times, 300_000, 604_800_000) == (np.inf, -np.inf)
