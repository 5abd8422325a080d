"""ClientShard.without_runs (streaming.fastpath.quiet_responses): a client whose step events are all quiet metadata responses
gets them applied at once. That is only worth having if it is exact, so the engine with it must
give exactly what the engine gives applying every event: alerts, summaries, late counts,
invalid events, deadlines and the final state."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from streaming.engine.local import detect_all
from streaming.tools.simulate import SCENARIOS, run_scenario
from tests.support.builders import CLUSTER, batchings, failed, rebootstrap, response
from tests.support.event_strategies import examples

EXPIRY = RuleSettings().entity_expiry_ms
QUIET = RuleSettings().stale_incident_quiet_ms


def _one_by_one(first: list[dict], then: list[dict], horizon: int | None = None) -> list[int]:
    """Times of the events the clients key left to its one-by-one loop in a step over ``then``,
    after a first step over ``first``."""
    engine = KeyEngine.new("clients", CLUSTER, 0, RuleSettings())
    if first:
        engine.step(first, max(e["event_time"] for e in first))
    left = []
    without = engine.table.without_runs

    def recording(ready, floor):
        rest = without(ready, floor)
        left.extend(ev["event_time"] for ev in rest)
        return rest

    engine.table.without_runs = recording
    engine.step(then, horizon if horizon is not None else max(e["event_time"] for e in then))
    return left


CASES = [
    # 1. Responses at rising or equal epochs, one cluster id: applied at once.
    ([], [response(100, "a", 1, 7), response(200, "a", 2, 7), response(300, "a", 1, 8)], []),
    # 2. A failed request among them: the trigger needs the order, so every event goes one by one.
    ([], [response(100, "a", 1, 7), failed(200, "a"), response(300, "a", 1, 8)], [100, 200, 300]),
    # 3. The epoch goes down inside the step: the later response is stale.
    ([], [response(100, "a", 1, 8), response(200, "a", 2, 7)], [100, 200]),
    # 4. The first epoch is below the one the client accepted in an earlier step: stale.
    ([response(50, "a", 1, 9)], [response(100, "a", 2, 8), response(200, "a", 2, 9)], [100, 200]),
    # 5. A stale incident is open (the client must close it with the answering broker's epoch).
    ([response(50, "a", 1, 9), response(60, "a", 2, 8)], [response(100, "a", 2, 9)], [100]),
    # 6. A failure is open: the first response ends it (and maybe an overdue incident).
    ([failed(50, "a")], [response(100, "a", 1, 7), response(200, "a", 1, 7)], [100, 200]),
    # 7. Two cluster ids in the run, or one other than the client knows: a mismatch to raise.
    ([], [response(100, "a", 1, 7), response(200, "a", 1, 7, cluster="kc-2")], [100, 200]),
    ([response(50, "a", 1, 7)], [response(100, "a", 1, 7, cluster="kc-2")], [100]),
    # 8. A response older than the key's horizon arrives late: counted, so one by one.
    ([response(500, "b", 1, 7)], [response(400, "a", 1, 7), response(600, "a", 1, 7)], [400, 600]),
    # 9. A run spanning the entity expiry, or a client silent for it before: it may be forgotten
    #    in between and start over.
    ([], [response(100, "a", 1, 7), response(100 + EXPIRY, "a", 1, 7)], [100, 100 + EXPIRY]),
    ([response(50, "a", 1, 7)], [response(50 + EXPIRY, "a", 1, 7)], [50 + EXPIRY]),
    # 10. An error, no brokers listed, or an unknown epoch (-1): not a plain success.
    ([], [response(100, "a", 1, 7, error=129)], [100]),
    ([], [response(100, "a", 1, 7, brokers=0)], [100]),
    ([], [response(100, "a", 1, -1)], [100]),
    # 11. A rebootstrap in the step: one by one (it may reset the accepted epoch).
    ([], [rebootstrap(100, "a"), response(200, "a", 1, 7)], [100, 200]),
    # 12. Clients are judged on their own: a quiet one next to one with a failure.
    ([], [response(100, "a", 1, 7), failed(150, "b"), response(200, "a", 1, 7), response(250, "b", 1, 7)],
     [150, 250]),
    # 13. An event without a client id is invalid: reported one by one, the quiet client is not.
    ([], [response(100, "", 1, 7), response(200, "a", 1, 7)], [100]),
]


@pytest.mark.parametrize("first,then,expected", CASES, ids=[f"case{i}" for i in range(1, len(CASES) + 1)])
def test_which_events_are_applied_one_by_one(first, then, expected):
    assert _one_by_one(first, then) == expected


def test_a_quiet_run_leaves_the_record_as_its_responses_one_by_one():
    """Why: the run is applied as its last response; every field must end as the events one by
    one leave it: times (newest), accepted epoch and time (the last response), the cluster id
    learned from the run."""
    events = [response(100, "a", 1, 7, cluster=None), response(200, "a", 2, 8), response(300, "a", 1, 8)]
    records = []
    for quiet in (True, False):
        engine = KeyEngine.new("clients", CLUSTER, 0, RuleSettings(fast_paths="on" if quiet else "off"))
        engine.step(events, 300)
        records.append(dataclasses.asdict(engine.table.clients["a"]))
    assert records[0] == records[1]
    assert (records[0]["accepted_epoch"], records[0]["accepted_ms"], records[0]["known_cluster_id"]) == (8, 300, "kc-1")


# --- exactness: the engine with the pass against the engine without it ------------------------

def _run_both(events, batches, rule_settings):
    """Step two engines through the same batches: the second applies every event one by one."""
    outputs = []
    for quiet in (True, False):
        engine = KeyEngine.new("clients", CLUSTER, 0,
                               rule_settings if quiet else dataclasses.replace(rule_settings, fast_paths="off"))
        steps = []
        for batch, horizon in batches(events):
            r = engine.step(batch, horizon)
            steps.append((r.alerts, r.summaries, r.late, r.deadline,
                          [(ev["event_id"], reason) for ev, reason in r.invalid]))
        final = ({c: dataclasses.asdict(rec) for c, rec in engine.table.clients.items()},
                 engine.tracker.to_rows(), engine.horizon, engine.buffer)
        outputs.append((steps, final))
    return outputs


TIGHT = RuleSettings(rebootstrap_trigger_ms=3000, stale_incident_quiet_ms=2000, entity_expiry_ms=5000,
                     allowed_lateness_ms=300)


@st.composite
def client_streams(draw):
    """Few clients, few epochs and clusters, small steps with occasional long gaps: long quiet
    runs broken by failures, rebootstraps, stale answers, other cluster ids, errors and late
    arrivals."""
    events, t = [], 0
    for _ in range(draw(st.integers(1, 120))):
        t += draw(st.sampled_from([0, 1, 50, 200, 700, 1600, 4000, 6000]))
        client, broker = draw(st.sampled_from(["a", "b", "c", "d"])), draw(st.integers(1, 3))
        at = max(0, t - draw(st.sampled_from([0, 0, 0, 0, 400, 2500])))
        kind = draw(st.sampled_from(["quiet"] * 8 + ["failed", "rebootstrap", "other"]))
        if kind == "quiet":
            events.append(response(at, client, broker, draw(st.integers(8, 12)),
                                   cluster=draw(st.sampled_from(["kc-1"] * 6 + [None, "kc-2"]))))
        elif kind == "failed":
            events.append(failed(at, client))
        elif kind == "rebootstrap":
            events.append(rebootstrap(at, client, after=draw(st.sampled_from(["kc-1", "kc-2"]))))
        else:  # not a plain success, or invalid for the engine
            events.append(draw(st.sampled_from([response(at, client, broker, -1), response(at, client, broker, 9, error=129),
                                                response(at, client, broker, 9, brokers=0), response(at, "", broker, 9)])))
    return events


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=client_streams(), cut=st.sampled_from([1, 7, 40, 10_000]),
       rule_settings=st.sampled_from([RuleSettings(), TIGHT]))
def test_the_pass_changes_nothing_the_engine_reports(events, cut, rule_settings):
    quiet, one_by_one = _run_both(events, batchings(cut, tail_ms=400_000), rule_settings)
    assert quiet == one_by_one


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_incident_gives_the_same_alerts_without_the_pass(name):
    result = run_scenario(name)
    settings_, until = result.truth.rule_settings(), result.truth.end_ms
    with_pass = detect_all(result.events, settings_, until=until)
    assert detect_all(result.events, dataclasses.replace(settings_, fast_paths="off"), until=until) == with_pass


def test_with_fast_paths_off_no_table_pass_runs():
    """The switch the equivalence tests flip must reach the engine: off, no pass is asked."""
    def refuse(ready, floor):
        raise AssertionError("a fast path ran with rules.fast.paths off")

    for kind in ("clients", "brokers"):
        engine = KeyEngine.new(kind, CLUSTER, 0, RuleSettings(fast_paths="off"))
        engine.table.without_runs = refuse
        engine.step([response(100, "a", 1, 7), response(200, "a", 1, 7), response(300, "a", 1, 7)], 300)
