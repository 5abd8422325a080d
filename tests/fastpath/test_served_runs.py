"""BrokerFleet.without_runs (streaming.fastpath.served_runs): the brokers key skips served epochs that cannot change
anything. The filter is only worth having if it is exact, so the engine with it must give exactly
what the engine gives applying every event (rules.fast.paths off): alerts, transitions, status rows, summaries, late
counts, deadlines and the final state."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming.config import RuleSettings
from streaming.engine.key_engine import KeyEngine
from streaming.engine.local import detect_all
from streaming.tools.simulate import SCENARIOS, run_scenario
from tests.support.builders import CLUSTER, batchings, hb, response, update
from tests.support.event_strategies import examples

GRACE = RuleSettings().metadata_lag_grace_ms
BASE = [hb(0, 1), update(10, 1, 10)]


def _applied_serves(events: list[dict]) -> list[int]:
    """Times of the served epochs the brokers key applied, in one step over ``events``, after a
    first step over BASE (broker 1 heartbeats and applies epoch 10, the cluster's newest)."""
    engine = KeyEngine.new("brokers", CLUSTER, 0, RuleSettings())
    engine.step(BASE, 10)
    applied = []
    apply = engine.table.apply

    def counting(ev):
        if ev["event_type"] == "metadata_response":
            applied.append(ev["event_time"])
        return apply(ev)

    engine.table.apply = counting
    engine.step(events, max(e["event_time"] for e in events))
    return applied


def _serves(times, broker=1, epoch=10):
    return [response(t, f"client-{t}", broker, epoch) for t in times]



CASES = [
    # 1. A run of identical serves: only its first and last are applied.
    (_serves(range(100, 3100, 100)), [100, 3000]),
    # 2. A gap of the lag grace or more inside a run: the serve before the gap is kept, since
    #    last_served_ms is compared against that grace (a quiet broker stops counting as serving).
    #    (GRACE is 30 s: all of 100-300 lie in one half-grace bucket.)
    (_serves([100, 200, 300, 300 + GRACE, 400 + GRACE]), [100, 300, 300 + GRACE, 400 + GRACE]),
    # 3. Another epoch starts a new run: each run keeps its ends.
    (_serves([100, 200, 300]) + _serves([400, 500, 600], epoch=11), [100, 300, 400, 600]),
    # 4. An update that raises the cluster's newest epoch ends every run (the broker may fall
    #    behind at that moment): the serves around it are kept.
    (_serves([100, 200, 300]) + [update(350, 2, 11)] + _serves([400, 500, 600]), [100, 300, 400, 600]),
    # 5. An update that does not raise the newest epoch (another broker catching up) ends no run.
    (_serves([100, 200, 300]) + [update(350, 2, 10)] + _serves([400, 500, 600]), [100, 600]),
    # 6. A heartbeat of the serving broker ends its run while it serves an epoch behind the
    #    cluster's newest (the heartbeat may restart its lag clock or take it out of serving, and
    #    then its last serve counts); another broker's heartbeat does not.
    (_serves([100, 200, 300], epoch=9) + [hb(350, 1)] + _serves([400, 500, 600], epoch=9), [100, 300, 400, 600]),
    (_serves([100, 200, 300], epoch=9) + [hb(350, 2)] + _serves([400, 500, 600], epoch=9), [100, 600]),
    #    Serving the newest epoch, the broker is behind on nothing: its heartbeats end no run
    #    (they come every 2 s).
    (_serves([100, 200, 300]) + [hb(350, 1)] + _serves([400, 500, 600]), [100, 600]),
    (_serves([100, 200, 300]) + [hb(350, 1, inc=2)] + _serves([400, 500, 600]), [100, 600]),
    (_serves([100, 200, 300]) + [hb(350, 1, target="STOPPING")] + _serves([400, 500, 600]), [100, 600]),
    #    ... unless an update raised the newest epoch past it in between (case 4 ends that run anyway).
    (_serves([100, 200]) + [update(250, 2, 11), hb(300, 1)] + _serves([400, 500, 600]), [100, 200, 400, 600]),
    # 7. Serves of two brokers interleaved: each broker has its own run.
    (sorted(_serves(range(100, 600, 100)) + _serves(range(150, 650, 100), broker=2),
                   key=lambda e: e["event_time"]), [100, 150, 500, 550]),
    # 8. An error or an unknown epoch is no serve: it joins no run, and ends the broker's run (rare;
    #    on_served_epoch still compares that broker with the newest epoch).
    (_serves([100, 200, 220]) + [response(250, "x", 1, -1), response(260, "y", 1, 10, error=129)]
     + _serves([300, 400, 500]), [100, 220, 250, 260, 300, 500]),
    # 9. A run crossing a half-grace bucket keeps the last serve before and the first after the
    #    bucket edge, so kept serves stay less than the grace apart.
    (_serves([GRACE // 2 - 200, GRACE // 2 - 100, GRACE // 2 - 50, GRACE // 2 + 50, GRACE // 2 + 100,
              GRACE // 2 + 200]), [GRACE // 2 - 200, GRACE // 2 - 50, GRACE // 2 + 50, GRACE // 2 + 200]),
    # 10. Broker ids far apart (the largest int32 beside 1: the pass's fast 16-bit path does not
    #     apply) change nothing: each broker still has its own run.
    (sorted(_serves(range(100, 600, 100)) + _serves(range(150, 650, 100), broker=2**31 - 1),
            key=lambda e: e["event_time"]), [100, 150, 500, 550]),
    # 11. Once an update of the step raised the newest epoch, the other brokers applying the same
    #     epoch end no run (a fleet's 1,000 brokers each apply every epoch).
    (_serves([100, 200, 300]) + [update(350, 2, 11)] + _serves([400]) + [update(450, 3, 11)] + _serves([500, 600]),
     [100, 300, 400, 600]),
    # 12. ... but an update from a controller epoch below one already seen may have been ignored
    #     (a deposed controller's, for a broker that applied the newer one's): it raised nothing
    #     for sure, so the next update to that epoch still ends every run.
    ([update(50, 2, 10, controller_epoch=2)] + _serves([100, 200, 300]) + [update(350, 2, 11, controller_epoch=1)]
     + _serves([400, 500]) + [update(550, 3, 11, controller_epoch=2)] + _serves([600, 700, 800]),
     [100, 300, 400, 500, 600, 800]),
]


@pytest.mark.parametrize("events,expected", CASES, ids=[f"case{i}" for i in range(1, len(CASES) + 1)])
def test_which_serves_are_applied(events, expected):
    assert _applied_serves(events) == expected


def test_a_serve_older_than_the_last_one_stored_starts_no_run():
    """Why: on_served_epoch ignores a serve older than the broker's last_served_ms, so such a
    serve never moved last_served_ms and cannot anchor a run; the next ones must be applied."""
    engine = KeyEngine.new("brokers", CLUSTER, 0, RuleSettings())
    engine.step(_serves([5000]), 5000)
    applied = []
    apply = engine.table.apply
    engine.table.apply = lambda ev: applied.append(ev["event_time"]) or apply(ev)
    engine.step(_serves([4000, 4100, 4200]), 6000)
    assert applied == [4000, 4100, 4200]


# --- exactness: the engine with the filter against the engine without it ----------------------

def _plain(rule_settings: RuleSettings) -> RuleSettings:
    """The same settings with rules.fast.paths off: every event through the rules one by one."""
    return dataclasses.replace(rule_settings, fast_paths="off")


def _run_both(events, batches, rule_settings):
    """Step two engines through the same batches: the second applies every event."""
    outputs = []
    for filtered in (True, False):
        engine = KeyEngine.new("brokers", CLUSTER, 0, rule_settings if filtered else _plain(rule_settings))
        steps = []
        for batch, horizon in batches(events):
            r = engine.step(batch, horizon)
            steps.append((r.alerts, r.transitions, r.status, r.summaries, r.late, r.deadline,
                          [(ev["event_id"], reason) for ev, reason in r.invalid]))
        final = (dataclasses.asdict(engine.table.cluster),
                 {b: dataclasses.asdict(rec) for b, rec in engine.table.brokers.items()},
                 engine.tracker.to_rows(), engine.horizon, engine.buffer)
        outputs.append((steps, final))
    return outputs


TIGHT = RuleSettings(controller_heartbeat_timeout_ms=3000, broker_heartbeat_interval_ms=1000,
                     heartbeat_timeout_pending_ms=0, metadata_lag_grace_ms=1500, entity_expiry_ms=60_000,
                     stopping_grace_ms=5000, not_returned_grace_ms=5000, flapping_transitions=2,
                     duplicate_min_heartbeats=1, allowed_lateness_ms=300)


@st.composite
def broker_streams(draw):
    """Few brokers, few epochs, small time steps with occasional long gaps: long runs of serves
    broken by updates, heartbeats, restarts, errors and late arrivals."""
    events, t = [], 0
    for i in range(draw(st.integers(1, 120))):
        t += draw(st.sampled_from([0, 1, 50, 200, 700, 1600, 4000]))
        broker, epoch = draw(st.integers(1, 3)), draw(st.integers(8, 12))
        late = draw(st.sampled_from([0, 0, 0, 0, 400, 2500]))
        at = max(0, t - late)
        kind = draw(st.sampled_from(["serve"] * 6 + ["update", "heartbeat", "bad"]))
        if kind == "serve":
            events.append(response(at, f"c{i % 4}", broker, epoch))
        elif kind == "update":
            events.append(update(at, broker, epoch, controller_epoch=draw(st.integers(1, 2))))
        elif kind == "heartbeat":
            events.append(hb(at, broker, inc=draw(st.integers(1, 3)),
                             target=draw(st.sampled_from(["ACTIVE", "ACTIVE", "STOPPING"]))))
        else:  # ignored by the rules, or invalid for the engine
            events.append(draw(st.sampled_from([response(at, "c", broker, -1), response(at, "c", broker, epoch, error=5),
                                                response(at, "", broker, epoch)])))
    return events


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=broker_streams(), cut=st.sampled_from([1, 7, 40, 10_000]),
       rule_settings=st.sampled_from([RuleSettings(), TIGHT]))
def test_the_filter_changes_nothing_the_engine_reports(events, cut, rule_settings):
    filtered, unfiltered = _run_both(events, batchings(cut, tail_ms=20_000), rule_settings)
    assert filtered == unfiltered


@st.composite
def heartbeats_inside_runs(draw):
    """One broker's long runs of serves at one epoch, its own heartbeats in between (restarts, old
    incarnations, fencing, shutdown), and another broker's updates that leave it behind or not."""
    events, t, epoch = [], 0, draw(st.integers(9, 10))
    for i in range(draw(st.integers(3, 80))):
        t += draw(st.sampled_from([1, 100, 400, 900, 2000]))
        kind = draw(st.sampled_from(["serve"] * 8 + ["heartbeat"] * 3 + ["update", "epoch"]))
        if kind == "serve":
            events.append(response(t, f"c{i % 3}", 1, epoch))
        elif kind == "heartbeat":
            events.append(hb(t, 1, inc=draw(st.integers(1, 3)), target=draw(st.sampled_from(["ACTIVE", "STOPPING"])),
                             current=draw(st.sampled_from([None, "INACTIVE"])), want_fence=draw(st.booleans())))
        elif kind == "update":
            events.append(update(t, 2, draw(st.integers(9, 12))))
        else:
            epoch = draw(st.integers(8, 12))
    return events


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=heartbeats_inside_runs(), cut=st.sampled_from([1, 5, 10_000]),
       rule_settings=st.sampled_from([RuleSettings(), TIGHT]))
def test_heartbeats_inside_runs_change_nothing_the_engine_reports(events, cut, rule_settings):
    filtered, unfiltered = _run_both([*BASE, *events], batchings(cut, tail_ms=20_000), rule_settings)
    assert filtered == unfiltered


def test_an_evaluation_that_times_a_broker_out_leaves_no_evaluation_for_the_next_event():
    """Found by the property above. ClusterSilent's deadline evaluation at 9,001 also times the
    stopping broker 1 out; that must not make whichever event comes next evaluate again: the filter
    skips the serve at 10,007 the plain engine applies, and the resolved alert described the fleet
    after broker 2 appeared (2 brokers) with the filter, before it (1 broker) without."""
    events = [*BASE, hb(1, 1, target="STOPPING"), *_serves([7, 8007, 10007], epoch=8), update(10008, 2, 9),
              *_serves([10009], epoch=8), hb(10010, 1)]
    filtered, unfiltered = _run_both(events, batchings(10_000, tail_ms=20_000), RuleSettings())
    resolved = [a for alerts, *_ in filtered[0] for a in alerts
                if a["alertname"] == "ClusterSilent" and a["status"] == "resolved"]
    assert [a["annotations"]["description"] for a in resolved] == [
        "no heartbeat from any of 1 brokers since 1970-01-01T00:00:00.001Z"]
    assert filtered == unfiltered


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_incident_gives_the_same_alerts_without_the_filter(name):
    result = run_scenario(name)
    settings_, until = result.truth.rule_settings(), result.truth.end_ms
    with_filter = detect_all(result.events, settings_, until=until)
    assert detect_all(result.events, _plain(settings_), until=until) == with_filter
