"""A cluster's state holds at most rules.state.max.*.per.cluster entities (issue #22,
cardinality): a producer inventing ids (a bug, a forgery) gets dead letters (reason
entity_cap), the entities already known go on as before, and a slot freed by expiry is taken
again. A table of numbered cases, each saying why."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streaming.config import ConfigError, RuleSettings, load
from streaming.engine.key_engine import KeyEngine
from streaming.spark.key_steps import _output_rows
from tests.support.builders import CLUSTER, commit, hb, response

CAP = 3


def rules(**caps) -> RuleSettings:
    return replace(RuleSettings(), client_shards=1, **caps)


# (case, kind, settings, events of the known entities, the event of one entity too many, why)
CASES = [
    (1, "brokers", rules(max_brokers=CAP), [hb(1000 + b, b) for b in (1, 2, 3)], hb(1_500, 999),
     "a fleet of three: a fourth broker id (forged, or a broker id typo in a collector) would otherwise add a "
     "state record, status series and alerts of its own, one more per invented id"),
    (2, "clients", rules(max_clients=CAP), [response(1000 + i, f"app-{i}", 1, 10) for i in range(CAP)],
     response(1_500, "app-invented", 1, 10),
     "100,000 real clients are fine; a producer inventing a client id per event would grow the shard forever"),
    (3, "commits", rules(max_commit_partitions=CAP), [commit(1000 + p, "g", 1, partition=p) for p in range(CAP)],
     commit(1_500, "g", 1, partition=99),
     "commit partitions are (group, topic, partition): an invented group per commit must not fill the store"),
]


@pytest.mark.parametrize("case, kind, settings, known, extra, why", CASES, ids=[str(c[0]) for c in CASES])
def test_one_entity_too_many_is_refused_and_the_known_ones_go_on(case, kind, settings, known, extra, why):
    engine = KeyEngine.new(kind, CLUSTER, 0, settings)
    first = engine.step(known, 1_000)
    assert not first.capped
    result = engine.step([extra, *[{**ev, "event_time": ev["event_time"] + 1_000} for ev in known]], 2_000)
    assert [ev for ev, _ in result.capped] == [extra], why
    [(_, reason)] = result.capped
    assert "refused" in reason and "rules.state.max." in reason and f"={CAP}" in reason
    assert len(getattr(engine.table, kind)) == CAP, "the known ones are still all there"


def test_a_refused_entity_is_a_dead_letter_with_reason_entity_cap():
    engine = KeyEngine.new("brokers", CLUSTER, 0, rules(max_brokers=1))
    engine.step([hb(1_000, 1)], 1_000)
    result = engine.step([hb(1_500, 2)], 1_500)
    rows = [r for r in _output_rows(CLUSTER, 1_500, result) if r["kind"] == "dead_letter"]
    assert len(rows) == 1 and '"reason":"entity_cap"' in rows[0]["payload"]
    assert "state.max.brokers.per.cluster=1" in rows[0]["payload"]


def test_a_slot_freed_by_expiry_is_taken_again():
    """A decommissioned broker expires (state.entity.expiry.ms): a new broker fits again."""
    settings = rules(max_brokers=1, entity_expiry_ms=10_000)
    engine = KeyEngine.new("brokers", CLUSTER, 0, settings)
    engine.step([hb(0, 1, target="STOPPING", current="STOPPING", want_shutdown=True)], 0)
    assert engine.step([hb(5_000, 2)], 5_000).capped, "broker 1 still held"
    assert not engine.step([hb(20_000, 2)], 20_000).capped, "broker 1 expired: broker 2 takes its place"


def test_a_cap_below_one_names_the_key_and_the_fix():
    with pytest.raises(ConfigError) as failure:
        load(None, {"rules.state.max.clients.per.cluster": 0})
    assert "rules.state.max.clients.per.cluster" in str(failure.value) and "1000000" in str(failure.value)
