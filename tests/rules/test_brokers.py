"""Broker lifecycle rules, table style: each case says why its expectation is right."""

import pytest

from streaming.config import RuleSettings
from tests.support.builders import hb, heartbeats, response, run, summary, update

B = (1, 2, 3)
S = RuleSettings()  # timeout 9000, pending 3000, heartbeat interval 2000
T_START = 1_767_225_600_000  # a start time in ms, the collector's incarnation: far past 0


def case(n, why, events, until, expected, **settings):
    return pytest.param(events, until, expected, RuleSettings(**settings) if settings else S, id=f"{n}-{why[:50]}")


CASES = [
    case(1, "steady heartbeats from every broker: nothing to say",
         heartbeats(B, 0, 60000), 60000, []),
    case(2, "broker 2 silent 30 s: INACTIVE after 9 s, fires after the 3 s pending, resolves on its next heartbeat",
         heartbeats(B, 0, 80000, skip=lambda b, t: b == 2 and 10000 < t < 40000), 80000,
         [("firing", "BrokerHeartbeatTimeout", "2"), ("resolved", "BrokerHeartbeatTimeout", "2")]),
    case(3, "a 10 s gap is past the timeout but shorter than timeout + pending: no page for a blip",
         heartbeats(B, 0, 60000, skip=lambda b, t: b == 2 and 10000 < t < 20000), 60000, []),
    case(4, "controlled shutdown (STOPPING) then silence is not a timeout; a higher incarnation is a restart (info)",
         heartbeats(B, 0, 20000) + [hb(20000 + d, 2, target="STOPPING") for d in (2, 2002, 4002)]
         + heartbeats((1, 3), 20000, 60000) + heartbeats((2,), 40000, 60000, inc=2), 60000,
         [("firing", "BrokerRestarted", "2")]),
    case(5, "a zombie: old incarnation heartbeats once after a restart (STALE_BROKER_EPOCH), then stops",
         heartbeats(B, 0, 20000) + heartbeats((1, 3), 20000, 60000) + heartbeats((2,), 21000, 60000, inc=2)
         + [hb(22500, 2, inc=1, error=77)], 60000,
         [("firing", "BrokerRestarted", "2"), ("firing", "BrokerIncarnationRegression", "2"),
          ("resolved", "BrokerIncarnationRegression", "2")]),
    case(6, "two processes with one broker id keep heartbeating: regression, then duplicate (critical)",
         heartbeats(B, 0, 20000) + heartbeats((1, 3), 20000, 40000) + heartbeats((2,), 20000, 40000, inc=2)
         + [hb(t + 500, 2, inc=1, error=101) for t in range(20000, 40000, 2000)], 40000,
         [("firing", "BrokerRestarted", "2"), ("firing", "BrokerIncarnationRegression", "2"),
          ("firing", "DuplicateBrokerId", "2")]),
    case(7, "the whole cluster goes quiet: one ClusterSilent, no per-broker timeouts; resolves when it returns",
         heartbeats(B, 0, 20000) + heartbeats(B, 60000, 70000), 70000,
         [("firing", "ClusterSilent", None), ("resolved", "ClusterSilent", None)]),
    case(8, "a broker already down before the cluster went quiet keeps its own alert",
         heartbeats(B, 0, 60000, skip=lambda b, t: b == 3 and t > 10000), 90000,
         [("firing", "BrokerHeartbeatTimeout", "3"), ("firing", "ClusterSilent", None)]),
    case(9, "STOPPING for longer than the grace period: stuck in controlled shutdown",
         heartbeats((1, 3), 0, 40000) + heartbeats((2,), 0, 40000, target="STOPPING"), 40000,
         [("firing", "BrokerStuckStopping", "2")], stopping_grace_ms=20000),
    case(10, "controlled shutdown and not back within the grace period",
         heartbeats((1, 3), 0, 60000) + heartbeats((2,), 0, 10000, target="STOPPING"), 60000,
         [("firing", "BrokerNotReturned", "2")], not_returned_grace_ms=30000),
    case(11, "silent spells every 50 s: the 3rd return is the 6th ACTIVE/INACTIVE transition: flapping",
         heartbeats(B, 0, 200000, skip=lambda b, t: b == 2 and (t % 50000) > 30000), 200000,
         [("firing", "BrokerHeartbeatTimeout", "2"), ("resolved", "BrokerHeartbeatTimeout", "2"),
          ("firing", "BrokerHeartbeatTimeout", "2"), ("resolved", "BrokerHeartbeatTimeout", "2"),
          ("firing", "BrokerHeartbeatTimeout", "2"), ("firing", "BrokerFlapping", "2"),
          ("resolved", "BrokerHeartbeatTimeout", "2"), ("firing", "BrokerHeartbeatTimeout", "2")]),
    case(12, "a new controller epoch is a failover (info, once)",
         heartbeats(B, 0, 20000) + heartbeats(B, 20000, 40000, controller=101, controller_epoch=2), 40000,
         [("firing", "ControllerFailover", None)]),
    case(13, "an incarnation going down without a controller error is still a regression (KIP-343)",
         heartbeats(B, 0, 20000, inc=5) + [hb(20100, 1, inc=4)] + heartbeats(B, 20000, 50000, inc=5), 50000,
         [("firing", "BrokerIncarnationRegression", "1"), ("resolved", "BrokerIncarnationRegression", "1")]),
    case(14, "a heartbeat delivered late (older than the last one) changes nothing",
         heartbeats(B, 0, 40000) + [hb(5001, 1, target="STOPPING")], 40000, []),
    case(15, "controlled shutdown, then the controller's fence read before the timeout (a collector's "
             "round): still a shutdown, not back within the grace period",
         heartbeats((1, 3), 0, 60000) + heartbeats((2,), 0, 10000, target="STOPPING")
         + [hb(10500, 2, current="INACTIVE")], 60000,
         [("firing", "BrokerNotReturned", "2")], not_returned_grace_ms=30000),
    case(16, "fenced by the controller while ACTIVE is not a shutdown: a timeout-free fence pages nobody",
         heartbeats((1, 3), 0, 60000) + heartbeats((2,), 0, 10000) + [hb(10500, 2, current="INACTIVE")], 60000,
         [], not_returned_grace_ms=30000),
    case(17, "incarnation 0 (its sender could not tell) then a start time: learned, not a restart; a later one is",
         heartbeats(B, 0, 20000, inc=0) + heartbeats(B, 20000, 40000, inc=T_START)
         + heartbeats((1, 3), 40000, 60000, inc=T_START) + heartbeats((2,), 40000, 60000, inc=T_START + 30000),
         60000, [("firing", "BrokerRestarted", "2")]),
    case(18, "incarnation 0 after a known one (a collector restarted, pages late) counts for the known process",
         heartbeats(B, 0, 20000, inc=T_START) + heartbeats(B, 20000, 40000, inc=0)
         + heartbeats(B, 40000, 60000, inc=T_START), 60000, []),
    case(19, "incarnation 0 with STALE_BROKER_EPOCH is still an old incarnation's heartbeat",
         heartbeats(B, 0, 40000, inc=T_START) + [hb(20500, 2, inc=0, error=77)], 40000,
         [("firing", "BrokerIncarnationRegression", "2"), ("resolved", "BrokerIncarnationRegression", "2")]),
]


@pytest.mark.parametrize("events,until,expected,settings", CASES)
def test_broker_rules(events, until, expected, settings):
    alerts, _ = run("brokers", events, until, settings)
    assert summary(alerts) == expected


@pytest.mark.parametrize("events,until,expected,settings", CASES)
def test_same_result_whatever_the_batching(events, until, expected, settings):
    """Why: the engine applies events in event-time order up to the horizon, so cutting the
    stream into micro-batches differently must not change a single alert."""
    one, _ = run("brokers", events, until, settings)
    many, _ = run("brokers", events, until, settings, batch=7)
    assert [(a["event_id"], a["event_time"]) for a in many] == [(a["event_id"], a["event_time"]) for a in one]


def _epochs(brokers, start, end, lagging=None, stop_at=None):
    out, epoch = [], 0
    for t in range(start, end, 3000):
        epoch += 1
        for b in brokers:
            if b == lagging and t >= stop_at:
                continue
            out.append(update(t + 100 * b, b, epoch))
    return out


EPOCH_CASES = [
    pytest.param(heartbeats(B, 0, 90000) + _epochs(B, 0, 90000), 90000, [], id="1-all brokers keep up: no lag"),
    pytest.param(heartbeats(B, 0, 90000) + _epochs(B, 0, 90000, lagging=2, stop_at=20000), 90000,
                 [("firing", "BrokerMetadataLag", "2")],
                 id="2-broker 2 stops applying updates while heartbeating: behind for > 30 s grace"),
    pytest.param(heartbeats(B, 0, 90000, skip=lambda b, t: b == 2 and t > 20000)
                 + _epochs(B, 0, 90000, lagging=2, stop_at=20000)
                 + [response(t, "c", 2, 6) for t in range(21000, 90000, 5000)], 90000,
                 [("firing", "BrokerHeartbeatTimeout", "2"), ("firing", "BrokerMetadataLag", "2")],
                 id="3-partitioned: no heartbeats, no updates, still answering clients with an old epoch"),
    pytest.param(heartbeats(B, 0, 90000, skip=lambda b, t: b == 2 and t > 20000)
                 + _epochs(B, 0, 90000, lagging=2, stop_at=20000), 90000,
                 [("firing", "BrokerHeartbeatTimeout", "2")],
                 id="4-a dead broker that serves nobody is not lagging, only down"),
    pytest.param(heartbeats(B, 0, 60000) + _epochs(B, 0, 30000) + [update(30500, 1, 3)], 60000,
                 [("firing", "MetadataEpochRegression", None)],
                 id="5-an epoch below one already applied, same controller epoch: regression"),
]


@pytest.mark.parametrize("events,until,expected", EPOCH_CASES)
def test_metadata_epoch_rules(events, until, expected):
    alerts, _ = run("brokers", events, until)
    assert [s for s in summary(alerts) if s[0] == "firing"] == expected


def test_time_in_state_and_transitions_are_kept():
    """Why: on-call asks 'how long was it down'; the lifecycle keeps time per state."""
    events = heartbeats(B, 0, 60000, skip=lambda b, t: b == 2 and 10000 < t < 40000)
    _, engine = run("brokers", events, 60000)
    b2 = engine.table.brokers[2]
    assert b2.state == "ACTIVE"
    inactive_ms = b2.time_in_state_ms[1]
    assert inactive_ms == 40002 - (10002 + 9000)


def test_a_run_of_late_heartbeats_is_evaluated_once_not_once_per_event():
    """Why: a lagging partition delivers thousands of heartbeats behind the horizon; each one that
    brings a timed-out broker back changes state, and evaluating a 300-broker cluster per event
    made the engine ~10x slower (bench/RESULTS.md, head to head). They all evaluate at the same
    time (the horizon already passed), so one evaluation after the run says the same."""
    from streaming.engine.key_engine import KeyEngine
    from tests.support.builders import CLUSTER

    brokers = range(1, 301)
    engine = KeyEngine.new("brokers", CLUSTER, 0, S)
    engine.step(heartbeats(brokers, 0, 20000), 20000)
    on_time = heartbeats(range(1, 151), 20000, 40000)
    engine.step(on_time, 40000)  # brokers 151-300 are not heard from: their partition lags
    assert sum(b.state == "INACTIVE" for b in engine.table.brokers.values()) == 150
    evaluations = []
    evaluate = engine._evaluate
    engine._evaluate = lambda now, out: evaluations.append(now) or evaluate(now, out)
    late = heartbeats(range(151, 301), 20000, 40000)
    result = engine.step(late, 40000)
    assert result.late == len(late)
    assert len(evaluations) <= 2, f"{len(evaluations)} evaluations for {len(late)} late events"
    assert {b.state for b in engine.table.brokers.values()} == {"ACTIVE"}


def test_a_late_heartbeat_that_reverses_a_timeout_says_which_decision_it_reverses():
    """Why (issue 27): a report draws transitions in time order; the reversal of a timeout by a
    heartbeat read late is stamped before the timeout it reverses, and drawn by time alone the
    broker stayed red to the end. ``reverses_at_ms`` names the decision undone."""
    from streaming.engine.key_engine import KeyEngine
    from tests.support.builders import CLUSTER

    engine = KeyEngine.new("brokers", CLUSTER, 0, S)
    engine.step(heartbeats([6], 0, 10000), 10000)
    timed_out = engine.step([], 30000).transitions
    assert [(t["to_state"], t["at_ms"]) for t in timed_out] == [("INACTIVE", 8006 + S.controller_heartbeat_timeout_ms)]
    assert "reverses_at_ms" not in timed_out[0]
    back = engine.step(heartbeats([6], 10000, 30000), 30000).transitions
    assert back[0]["to_state"] == "ACTIVE" and back[0]["at_ms"] == 10006
    assert back[0]["reverses_at_ms"] == timed_out[0]["at_ms"]


def test_a_timeout_page_resolved_by_a_late_heartbeat_says_it_was_reversed():
    """Why (issue 27): the on-call engineer paged for a silent broker must learn from the resolve
    that the broker never was silent (the job read its heartbeats late), not go look for a flap."""
    from streaming.engine.key_engine import KeyEngine
    from tests.support.builders import CLUSTER

    engine = KeyEngine.new("brokers", CLUSTER, 0, S)
    engine.step(heartbeats([1, 6], 0, 10000), 10000)
    fired = engine.step(heartbeats([1], 10000, 60000), 60000).alerts  # broker 6's wait unread
    assert [(a["alertname"], a["status"]) for a in fired] == [("BrokerHeartbeatTimeout", "firing")]
    resolved = engine.step(heartbeats([6], 10000, 60000), 60000).alerts
    assert [(a["alertname"], a["status"]) for a in resolved] == [("BrokerHeartbeatTimeout", "resolved")]
    assert resolved[0]["annotations"]["description"].startswith("reversed: a heartbeat of ")
    assert "broker 6 was not silent" in resolved[0]["annotations"]["description"]
