"""A cluster_reset (epochwatch reset-cluster) makes a key forget everything, in event-time order:
its open alerts resolve at the reset's time, the events after it start afresh."""

from __future__ import annotations

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from tests.support.builders import CLUSTER, hb, reset, response, summary


def test_a_reset_resolves_what_a_bogus_broker_left_open_and_forgets_it():
    """Why: a producer heartbeating once as broker 999 (no such broker) leaves a heartbeat
    timeout open for as long as the engine remembers the broker, and it remembers a broker with
    an open alert for good. Nothing tells such a heartbeat from a real one: the operator resets."""
    engine = KeyEngine.new("brokers", CLUSTER, 0, RuleSettings())
    beats = [hb(t + b, b) for t in range(0, 60_000, 2000) for b in (1, 2)]
    first = engine.step(beats[:20] + [hb(1_000, 999)], 20_000)
    later = engine.step(beats[20:] + [reset(40_000)], 60_000)
    alerts = first.alerts + later.alerts
    assert summary(alerts) == [("firing", "BrokerHeartbeatTimeout", "999"), ("resolved", "BrokerHeartbeatTimeout", "999")]
    assert alerts[-1]["ends_at"] == 40_000
    assert set(engine.table.brokers) == {1, 2}, "only what came after the reset"
    assert engine.table.brokers[1].restarts == 0 and engine.table.brokers[1].state == "ACTIVE"


def test_a_reset_within_a_run_of_quiet_responses_is_applied_in_order():
    """Why: a clients key applies runs of plain responses at once, from the state before the step;
    a reset inside the run must not be skipped over (the client's epoch before it is forgotten)."""
    engine = KeyEngine.new("clients", CLUSTER, 0, RuleSettings())
    engine.step([response(t, "a", 1, 100) for t in range(0, 10_000, 1000)], 10_000)
    engine.step([response(11_000, "a", 1, 100), reset(12_000), response(13_000, "a", 1, 5),
                 response(14_000, "a", 1, 6)], 20_000)
    assert engine.table.clients["a"].accepted_epoch == 6, "epoch 5 after the reset is not stale"
    assert not engine.tracker.open
