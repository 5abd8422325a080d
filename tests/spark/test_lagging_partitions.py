"""A partition of the events topic that is behind (issue 27): the packs' clock stops at its first
unread event (udfs.read_progress, streaming.spark.packs), and no key's horizon may pass it. Here in
processing time, where the horizon follows each key's newest event: heartbeats of broker 1 read
from a partition that runs ahead must not time out broker 6, whose heartbeats wait unread."""

from __future__ import annotations

import orjson

from streaming.config import RuleSettings
from streaming.spark.key_steps import KeySteps, StepRequest, StoredState
from tests.support.builders import hb
from tests.support.key_feed import packed

KEY = ("c1", "brokers", 0)
START = 1_795_000_000_000


def beats(broker: int, start_s: int, end_s: int) -> list[dict]:
    out = []
    for t in range(start_s, end_s, 2):
        ev = hb(START + t * 1000, broker)
        ev["cluster_id"] = "c1"
        out.append(ev)
    return out


def live_steps(second_clock_ms):
    """Three processing-time steps of the brokers key; the second carries only broker 1's next
    minute (its partition ran ahead) with the packs' clock ``second_clock_ms``; the third brings
    broker 6's minute. Returns the transitions of every step."""
    rules, steps = RuleSettings(), KeySteps()
    meta, transitions = None, []
    feeds = [(beats(1, 0, 10) + beats(6, 0, 10), 10, START + 8_000),
             (beats(1, 10, 70), 70, second_clock_ms),
             (beats(6, 10, 70), 72, None)]
    for events, wall_s, clock_ms in feeds:
        events.sort(key=lambda e: e["event_time"])
        req = StepRequest(rules, *KEY, tuple(packed(events, KEY)), meta, False, 0, START + wall_s * 1000,
                          clock_ms, query="q")
        out = steps.step(req) or steps.step(req, StoredState(None, [], []))
        meta = out.meta
        transitions += [orjson.loads(r["payload"]) for r in out.rows if r["kind"] == "transition"]
    return transitions


def test_the_clock_held_at_the_lagging_partition_keeps_broker_6_active():
    # broker 6's first unread heartbeat (at +10 s) is where the clock stops
    assert [t for t in live_steps(START + 10_000) if t["to_state"] == "INACTIVE"] == []


def test_without_the_cap_the_same_steps_time_broker_6_out():
    """The same steps with the clock at the newest event read: the failure the cap prevents."""
    timed_out = [t for t in live_steps(START + 68_000) if t["to_state"] == "INACTIVE"]
    assert [t["broker_id"] for t in timed_out] == [6]


def timer_only_steps(hold_ms):
    """Processing time again, but the whole cluster's later heartbeats wait in the partition that
    is behind: the key's second step is its timer alone, with the batch's hold (or none)."""
    rules, steps = RuleSettings(), KeySteps()
    meta, transitions, timers = None, [], []
    feeds = [(beats(1, 0, 10) + beats(6, 0, 10), 10, START + 8_000),
             ([], 70, hold_ms),
             (beats(1, 10, 70) + beats(6, 10, 70), 72, None)]
    for events, wall_s, clock_ms in feeds:
        events.sort(key=lambda e: e["event_time"])
        req = StepRequest(rules, *KEY, tuple(packed(events, KEY)) if events else (), meta, False, 0,
                          START + wall_s * 1000, clock_ms, query="q")
        out = steps.step(req) or steps.step(req, StoredState(None, [], []))
        meta = out.meta
        timers.append(out.timer_ms)
        transitions += [orjson.loads(r["payload"]) for r in out.rows if r["kind"] == "transition"]
    return transitions, timers


def test_a_timer_step_held_at_the_lagging_partition_times_no_broker_out_and_wakes_again():
    transitions, timers = timer_only_steps(START + 10_000)
    assert [t for t in transitions if t["to_state"] == "INACTIVE"] == []
    # the held step's deadline is still due: its new timer lies just ahead of it, not on the one
    # that fired (Spark deletes a fired timer once it is handled)
    assert timers[1] == START + 70_001


def test_without_the_hold_the_timer_step_times_the_whole_cluster_out():
    """What processing time does without the hold: right for a cluster truly silent, wrong here."""
    transitions, _ = timer_only_steps(None)
    assert sorted(t["broker_id"] for t in transitions if t["to_state"] == "INACTIVE") == [1, 6]
