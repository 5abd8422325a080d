"""AlertTracker: conditions in, Alertmanager-style records out (Burrow style: numbered cases, each
saying why its expectation is right). Times in ms; BrokerHeartbeatTimeout waits for its pending
period (rules.heartbeat.timeout.pending.ms), BrokerRestarted is one-shot (info), the others fire
at once."""

from __future__ import annotations

import pytest

from streaming.config import RuleSettings
from streaming.rules.lifecycle import AlertTracker, condition

PENDING = 3000
SETTINGS = RuleSettings(heartbeat_timeout_pending_ms=PENDING)
TIMEOUT = ("BrokerHeartbeatTimeout", {"broker_id": 1})
LAG = ("BrokerMetadataLag", {"broker_id": 2})
RESTART = ("BrokerRestarted", {"broker_id": 3, "incarnation_id": 7})


def holds(alert, since):
    name, labels = alert
    return condition(name, since, "", **labels)


# (case, [(now, conditions holding at now)], expected [(alertname, status, event_time, starts_at)], why)
CASES = [
    (1, [(1000, [holds(LAG, 1000)])], [("BrokerMetadataLag", "firing", 1000, 1000)],
     "no pending period: fires when first seen"),
    (2, [(1000, [holds(TIMEOUT, 1000)]), (3999, [holds(TIMEOUT, 1000)])], [],
     "pending: nothing before since + pending"),
    (3, [(1000, [holds(TIMEOUT, 1000)]), (4000, [holds(TIMEOUT, 1000)])],
     [("BrokerHeartbeatTimeout", "firing", 4000, 1000)],
     "fires once pending has passed, starting when the condition began"),
    (4, [(1000, [holds(TIMEOUT, 1000)]), (9000, [holds(TIMEOUT, 1000)])],
     [("BrokerHeartbeatTimeout", "firing", 9000, 1000)],
     "evaluated late (a quiet key): fires at the evaluation, not back in time"),
    (5, [(1000, [holds(TIMEOUT, 1000)]), (2000, [])], [],
     "a condition gone while pending never fired: no record at all, nothing to resolve"),
    (6, [(1000, [holds(LAG, 1000)]), (2000, [holds(LAG, 1000)]), (5000, [holds(LAG, 1000)])],
     [("BrokerMetadataLag", "firing", 1000, 1000)],
     "one firing record per incident, however often it is evaluated"),
    (7, [(1000, [holds(LAG, 1000)]), (5000, [])],
     [("BrokerMetadataLag", "firing", 1000, 1000), ("BrokerMetadataLag", "resolved", 5000, 1000)],
     "resolved when the condition stops holding, at that evaluation"),
    (8, [(1000, [holds(LAG, 1000)]), (5000, []), (6000, [holds(LAG, 6000)])],
     [("BrokerMetadataLag", "firing", 1000, 1000), ("BrokerMetadataLag", "resolved", 5000, 1000),
      ("BrokerMetadataLag", "firing", 6000, 6000)],
     "a new incident after a resolve starts afresh (its own start, so its own fingerprint)"),
    (9, [(1000, [holds(RESTART, 1000)]), (2000, [])], [("BrokerRestarted", "firing", 1000, 1000)],
     "one-shot: fires once, never resolved by a record"),
    (10, [(1000, [holds(RESTART, 1000)]), (2000, [holds(RESTART, 1000)])],
     [("BrokerRestarted", "firing", 1000, 1000), ("BrokerRestarted", "firing", 2000, 1000)],
     "one-shot conditions are not remembered: the rules report each once (they take them)"),
    (11, [(1000, [holds(LAG, 1000), holds(("BrokerMetadataLag", {"broker_id": 4}), 1000)]),
          (2000, [holds(LAG, 1000)])],
     [("BrokerMetadataLag", "firing", 1000, 1000), ("BrokerMetadataLag", "firing", 1000, 1000),
      ("BrokerMetadataLag", "resolved", 2000, 1000)],
     "labels tell incidents apart: broker 4's resolves alone"),
]


@pytest.mark.parametrize("case, steps, expected, why", CASES, ids=[str(c[0]) for c in CASES])
def test_tracker(case, steps, expected, why):
    tracker = AlertTracker("c1", SETTINGS)
    records = []
    for now, conditions in steps:
        records += tracker.update(conditions, now)
    got = [(r["alertname"], r["status"], r["event_time"], r["starts_at"]) for r in records]
    assert got == expected, f"case {case}: {why}"


def test_a_resolved_record_carries_the_firing_ones_fingerprint_and_its_end():
    """Why: Alertmanager matches a resolve to its alert by labels and start; the alerts topic by
    fingerprint (the record key)."""
    tracker = AlertTracker("c1", SETTINGS)
    [fired] = tracker.update([holds(LAG, 1000)], 1000)
    [resolved] = tracker.update([], 5000)
    assert resolved["fingerprint"] == fired["fingerprint"] and resolved["ends_at"] == 5000
    assert fired["ends_at"] is None and fired["labels"]["cluster"] == "c1" and fired["severity"] == "critical"


def test_the_next_deadline_is_when_a_pending_alert_becomes_due():
    tracker = AlertTracker("c1", SETTINGS)
    assert tracker.next_deadline() is None
    tracker.update([holds(TIMEOUT, 1000), holds(LAG, 1000)], 1000)
    assert tracker.next_deadline() == 1000 + PENDING, "the firing one is due no more"


def test_open_alerts_survive_a_round_trip_through_the_state_rows():
    """Why: the processor stores the tracker as rows between micro-batches; a pending alert must
    fire at the same time, and a firing one resolve, after the trip."""
    tracker = AlertTracker("c1", SETTINGS)
    tracker.update([holds(TIMEOUT, 1000), holds(LAG, 1000)], 1000)
    again = AlertTracker.from_rows("c1", SETTINGS, tracker.to_rows())
    records = again.update([holds(TIMEOUT, 1000)], 4000)
    assert [(r["alertname"], r["status"]) for r in records] == [
        ("BrokerHeartbeatTimeout", "firing"), ("BrokerMetadataLag", "resolved")]


def test_every_record_links_to_the_configured_runbooks():
    """Why: on-call reads the runbooks where the team keeps them (rules.runbook.base.url); the
    default is this repository's docs/alerts.md, one section per alert."""
    default = AlertTracker("c1", SETTINGS).update([holds(LAG, 1000)], 1000)
    assert default[0]["annotations"]["runbook_url"] == \
        "https://github.com/epochwatch/epochwatch/blob/main/docs/alerts.md#brokermetadatalag"
    wiki = RuleSettings(heartbeat_timeout_pending_ms=PENDING, runbook_base_url="https://wiki.example.com/kafka/alerts")
    tracker = AlertTracker("c1", wiki)
    records = tracker.update([holds(LAG, 1000), holds(RESTART, 1000)], 1000) + tracker.update([], 2000)
    assert [(r["status"], r["annotations"]["runbook_url"]) for r in records] == [
        ("firing", "https://wiki.example.com/kafka/alerts#brokermetadatalag"),
        ("firing", "https://wiki.example.com/kafka/alerts#brokerrestarted"),
        ("resolved", "https://wiki.example.com/kafka/alerts#brokermetadatalag")]
