"""One forged value must not poison a key's state for good (issue #22): an incarnation, a
metadata epoch or a controller epoch that leaps past what the key holds is refused
(StepResult.refused, dead-letter reason implausible_jump), and the real values after it are
judged as if it never came. A table of numbered cases, each saying why."""

from __future__ import annotations

import pytest

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from tests.support.builders import CLUSTER, commit, hb, response, summary, update

LEAP = 2**41  # past rules.event.max.epoch.jump (2^40), below rules.event.max.epoch (2^53)


def steady_heartbeats(start: int, end: int, inc: int = 7, controller_epoch: int = 1) -> list[dict]:
    return [hb(t + b, b, inc=inc, controller_epoch=controller_epoch) for t in range(start, end, 2000) for b in (1, 2)]


def step_all(kind: str, events: list[dict], until: int, batch: int = 0):
    """(alerts, refused) of one key fed ``events`` (in batches of ``batch``, 0: one step)."""
    engine = KeyEngine.new(kind, CLUSTER, 0, RuleSettings())
    events = sorted(events, key=lambda e: e["event_time"])
    chunks = [events[i:i + batch] for i in range(0, len(events), batch)] if batch else [events]
    results = [engine.step(chunk, chunk[-1]["event_time"] - 2000) for chunk in chunks if chunk]
    results.append(engine.step([], until))
    return [a for r in results for a in r.alerts], [(ev, why) for r in results for ev, why in r.refused]


# (case, key kind, events, the forged event, words of its reason, why)
CASES = [
    (1, "brokers", steady_heartbeats(0, 60_000), hb(21_001, 1, inc=7 + LEAP), "incarnation_id",
     "accepted, broker 1's real incarnation 7 would be an old one heartbeating: BrokerIncarnationRegression and "
     "DuplicateBrokerId for as long as the broker runs"),
    (2, "brokers", steady_heartbeats(0, 60_000) + [update(t, b, 100 + t // 5000) for t in range(0, 60_000, 5000)
                                                   for b in (1, 2)],
     update(21_003, 1, 100 + LEAP), "metadata_epoch",
     "accepted as the cluster's newest epoch, every broker would lag behind it for good (BrokerMetadataLag)"),
    (3, "brokers", steady_heartbeats(0, 60_000, controller_epoch=5), hb(21_001, 1, controller_epoch=5 + 2**30),
     "controller_epoch", "accepted, every update of the real controller would be a deposed controller's, ignored"),
    (4, "clients", [response(t, "a", 1, 100 + t // 5000) for t in range(0, 60_000, 1000)],
     response(21_500, "a", 1, 100 + LEAP), "metadata_epoch",
     "accepted, every later real answer to client a would be stale: StaleMetadataResponse for good"),
    (5, "commits", [commit(t, "g", 100 + t // 5000) for t in range(0, 60_000, 1000)],
     commit(21_500, "g", 100 + LEAP), "metadata_epoch",
     "accepted as the partition's epoch, every later real commit would be a regression"),
]


@pytest.mark.parametrize("case,kind,events,forged,field,why", CASES, ids=[f"case{c[0]}" for c in CASES])
@pytest.mark.parametrize("batch", [0, 7], ids=["one-step", "batches-of-7"])
def test_a_leaping_value_is_refused_and_poisons_nothing(case, kind, events, forged, field, why, batch):
    clean, refused = step_all(kind, events, 70_000, batch)
    assert refused == []
    alerts, refused = step_all(kind, events + [forged], 70_000, batch)
    assert [ev["event_id"] for ev, _ in refused] == [forged["event_id"]], f"case {case}: {why}"
    assert field in refused[0][1] and "leaps" in refused[0][1]
    assert summary(alerts) == summary(clean), f"case {case}: {why}"


def test_a_step_of_plain_increases_refuses_nothing():
    """Why: the limits are for what no cluster does; a broker back after a long absence comes
    back some million metadata offsets on, and must be applied."""
    events = steady_heartbeats(0, 10_000) + [hb(12_001, 1, inc=7 + 5_000_000)]
    alerts, refused = step_all("brokers", events, 20_000)
    assert refused == [] and ("firing", "BrokerRestarted", "1") in summary(alerts)


def test_a_leaping_incarnation_that_keeps_heartbeating_is_believed():
    """Why: a process that really runs with a leaping incarnation (a restart into another
    numbering, e.g. from 0 to a start time in ms; a second process claiming the id) must be heard:
    after broker.duplicate.min.heartbeats heartbeats it is a restart. One forged heartbeat is not."""
    s = RuleSettings()
    restart = [hb(21_001 + i * 2000, 1, inc=LEAP) for i in range(s.duplicate_min_heartbeats)]
    events = [ev for ev in steady_heartbeats(0, 60_000) if not (ev["broker_id"] == 1 and ev["event_time"] > 21_000)]
    alerts, refused = step_all("brokers", events + restart + [hb(t + 1, 1, inc=LEAP) for t in range(28_000, 60_000, 2000)],
                               70_000)
    assert [ev["event_id"] for ev, _ in refused] == [ev["event_id"] for ev in restart[:-1]]
    assert ("firing", "BrokerRestarted", "1") in summary(alerts)
