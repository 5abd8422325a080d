"""Each scripted incident's event stream has the shape the scenario table describes, read from
the events alone (not from the simulator's internals)."""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import pytest

from streaming import events
from streaming.tools.simulate import SCENARIOS, run_scenario, scenario_settings
from streaming.tools.simulate.kip601 import setup_timeout_range
from streaming.tools.simulate.scenarios import warmup_ms

S = scenario_settings()
I, T, P = S.broker_heartbeat_interval_ms, S.controller_heartbeat_timeout_ms, S.heartbeat_timeout_pending_ms


@cache
def scenario(name: str):
    return run_scenario(name)


def of(name: str, event_type: str, **where) -> list[dict]:
    return [e for e in scenario(name).events
            if e["event_type"] == event_type and all(e[k] == v for k, v in where.items())]


def k_of(name: str) -> int:
    return int(dict(scenario(name).truth.expected[0].labels)["broker_id"])


def gaps(times: list[int]) -> list[int]:
    return [b - a for a, b in zip(times, times[1:])]


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_is_ordered_valid_deterministic_and_warmed_up(name):
    result = scenario(name)
    times = [e["event_time"] for e in result.events]
    assert times == sorted(times)
    assert all(events.normalize(e) == e for e in result.events[:2000])
    assert run_scenario(name).events == result.events
    truth = result.truth
    assert truth.start_ms <= times[0] and times[-1] < truth.end_ms
    if truth.incident_at_ms is not None:
        assert truth.incident_at_ms - truth.start_ms >= max(2 * T, S.metadata_max_age_ms)
    assert 300 < len(result.events) < 10_000, "default scenarios stay small for end-to-end tests"


def test_rolling_restart_stops_each_broker_then_a_higher_incarnation_returns():
    beats = defaultdict(list)
    for e in of("rolling_restart", "broker_heartbeat"):
        beats[e["broker_id"]].append(e)
    for bid, hbs in beats.items():
        stopping = [i for i, e in enumerate(hbs) if e["target_state"] == "STOPPING"]
        assert len(stopping) >= 2 and all(hbs[i]["current_state"] == "STOPPING" for i in stopping)
        last_stopping, returned = hbs[stopping[-1]], hbs[stopping[-1] + 1]
        assert returned["event_time"] - last_stopping["event_time"] > T, "silence past the heartbeat timeout"
        assert returned["incarnation_id"] > last_stopping["incarnation_id"]
        assert (returned["target_state"], returned["current_state"]) == ("ACTIVE", "ACTIVE")
        catch_up = [u for u in of("rolling_restart", "metadata_update", broker_id=bid)
                    if u["event_time"] >= returned["event_time"]]
        assert catch_up[0]["event_time"] - returned["event_time"] <= 200


def test_partitioned_broker_goes_silent_lags_serves_stale_epochs_and_heals():
    k = k_of("partitioned_broker")
    hbs = [e["event_time"] for e in of("partitioned_broker", "broker_heartbeat", broker_id=k)]
    silence = max(gaps(hbs))
    assert silence > T + P
    cut = hbs[gaps(hbs).index(silence)]
    k_epoch = max(u["metadata_epoch"] for u in of("partitioned_broker", "metadata_update", broker_id=k)
                  if u["event_time"] <= cut)
    newest = max(u["metadata_epoch"] for u in of("partitioned_broker", "metadata_update")
                 if u["event_time"] <= cut + silence)
    assert newest > k_epoch + 5, "the others kept applying updates"
    accepted, stale = {}, []
    for e in of("partitioned_broker", "metadata_response"):
        if e["metadata_epoch"] < accepted.get(e["client_id"], -1):
            stale.append(e)
        accepted[e["client_id"]] = max(accepted.get(e["client_id"], -1), e["metadata_epoch"])
    assert stale and {e["broker_id"] for e in stale} == {k}
    assert {e["metadata_epoch"] for e in stale} == {k_epoch}
    assert len({e["incarnation_id"] for e in of("partitioned_broker", "broker_heartbeat", broker_id=k)}) == 1


def test_zombie_heartbeats_come_from_a_lower_incarnation_after_a_higher_one():
    k = k_of("zombie_incarnation")
    hbs = of("zombie_incarnation", "broker_heartbeat", broker_id=k)
    incarnations = sorted({e["incarnation_id"] for e in hbs})
    assert len(incarnations) == 2
    old, new = incarnations
    first_new = next(e["event_time"] for e in hbs if e["incarnation_id"] == new)
    zombies = [e for e in hbs if e["incarnation_id"] == old and e["event_time"] > first_new]
    assert 1 <= len(zombies) <= 2 and all(z["error_code"] == events.STALE_BROKER_EPOCH for z in zombies)
    last_old = max(e["event_time"] for e in hbs if e["incarnation_id"] == old and e["event_time"] < first_new)
    assert first_new - last_old < T, "restarted within the timeout"
    assert max(gaps([e["event_time"] for e in hbs])) < T


def test_duplicate_broker_id_has_two_live_incarnations_and_the_lower_one_gets_101():
    k = k_of("duplicate_broker_id")
    hbs = of("duplicate_broker_id", "broker_heartbeat", broker_id=k)
    old, new = sorted({e["incarnation_id"] for e in hbs})
    first_new = next(e["event_time"] for e in hbs if e["incarnation_id"] == new)
    rejected = [e for e in hbs if e["incarnation_id"] == old and e["event_time"] > first_new]
    assert len(rejected) > S.duplicate_min_heartbeats
    assert {e["error_code"] for e in rejected} == {events.DUPLICATE_BROKER_REGISTRATION}
    interleaved = [e["incarnation_id"] for e in hbs if first_new <= e["event_time"] <= rejected[-1]["event_time"]]
    assert interleaved.count(new) >= len(rejected) - 1, "both keep heartbeating"


def test_controller_failover_bumps_the_controller_epoch_and_epochs_keep_growing():
    updates = of("controller_failover", "metadata_update")
    controllers = sorted({(u["controller_epoch"], u["controller_id"]) for u in updates})
    assert len(controllers) == 2 and controllers[1][0] == controllers[0][0] + 1
    assert controllers[0][1] != controllers[1][1]
    epochs = sorted({u["metadata_epoch"] for u in updates})
    assert epochs == list(range(epochs[0], epochs[-1] + 1))
    assert [u["metadata_epoch"] for u in updates] == sorted(u["metadata_epoch"] for u in updates)


def test_metadata_epoch_regression_issues_a_lower_epoch_within_one_controller_epoch():
    updates = of("metadata_epoch_regression", "metadata_update")
    assert len({u["controller_epoch"] for u in updates}) == 1
    seen_max, regressions = -1, []
    for u in updates:
        if u["metadata_epoch"] < seen_max:
            regressions.append(u)
        seen_max = max(seen_max, u["metadata_epoch"])
    assert regressions and len({u["metadata_epoch"] for u in regressions}) == 1


def test_all_brokers_replaced_leaves_none_clients_stuck_and_rebootstrap_clients_recovered():
    name = "all_brokers_replaced"
    hb_ids = [e["broker_id"] for e in of(name, "broker_heartbeat")]
    old = set(hb_ids[:12])
    last_old = max(e["event_time"] for e in of(name, "broker_heartbeat") if e["broker_id"] in old)
    new = {e["broker_id"] for e in of(name, "broker_heartbeat") if e["event_time"] > last_old}
    assert new and not new & old
    failures, rebootstraps = defaultdict(list), defaultdict(list)
    for e in of(name, "metadata_request_failed"):
        failures[e["client_id"]].append(e)
    for e in of(name, "client_rebootstrap"):
        rebootstraps[e["client_id"]].append(e)
        assert e["reason"] == "NO_NODE_AVAILABLE" and e["cluster_id_before"] == e["cluster_id_after"]
    stuck = {c for c in failures if c not in rebootstraps}
    assert stuck and rebootstraps
    for c in stuck:
        times = [f["event_time"] for f in failures[c]]
        assert times[-1] - times[0] > S.rebootstrap_trigger_ms
        assert {f["reason"] for f in failures[c]} <= {"DISCONNECTED", "NO_NODE_AVAILABLE"}
        assert not [r for r in of(name, "metadata_response", client_id=c) if r["event_time"] > times[0]]
    for c in rebootstraps:
        after = [r for r in of(name, "metadata_response", client_id=c) if r["event_time"] > rebootstraps[c][0]["event_time"]]
        assert after and after[0]["broker_id"] in new


def test_proxy_answers_rebootstrap_required_to_half_the_clients_who_then_rebootstrap():
    name = "proxy_rebootstrap_required"
    answers = of(name, "metadata_response", error_code=events.REBOOTSTRAP_REQUIRED)
    assert {a["broker_id"] for a in answers} == {9000}
    assert len({a["client_id"] for a in answers}) >= 40 // 2
    for a in answers:
        again = of(name, "client_rebootstrap", client_id=a["client_id"])
        assert again[0]["reason"] == "REBOOTSTRAP_REQUIRED" and again[0]["event_time"] > a["event_time"]


def test_wrong_cluster_rebootstrap_lands_on_another_cluster_id():
    name = "wrong_cluster_rebootstrap"
    (reb,) = of(name, "client_rebootstrap")
    assert reb["cluster_id_before"] == "cluster-a" and reb["cluster_id_after"] == "cluster-b"
    answer = of(name, "metadata_response", client_id=reb["client_id"])[-1]
    assert answer["event_time"] > reb["event_time"] and answer["response_cluster_id"] == "cluster-b"


def test_connection_storm_timeouts_follow_kip601_and_count_failures_up():
    name = "connection_storm"
    timeouts = of(name, "connection_attempt", outcome="SETUP_TIMEOUT")
    node = int(dict(scenario(name).truth.expected[0].labels)["node_id"])
    assert {t["node_id"] for t in timeouts} == {node}
    per_client = defaultdict(list)
    for t in timeouts:
        per_client[t["client_id"]].append(t)
        low, high = setup_timeout_range(t["consecutive_failures"], S.connection_setup_timeout_ms,
                                        S.connection_setup_timeout_max_ms)
        assert low <= t["setup_timeout_ms"] <= high
    assert len(per_client) >= 2 * S.storm_min_clients
    for attempts in per_client.values():
        assert [a["consecutive_failures"] for a in attempts] == list(range(len(attempts)))
        assert all(b["event_time"] - a["event_time"] >= b["setup_timeout_ms"] for a, b in zip(attempts, attempts[1:]))
    assert any(a["setup_timeout_ms"] == S.connection_setup_timeout_max_ms for a in timeouts), "the cap is reached"
    failed = of(name, "metadata_request_failed", reason="CONNECTION_SETUP_TIMEOUT")
    assert {f["client_id"] for f in failed} == set(per_client)
    recovered = of(name, "connection_attempt", outcome="CONNECTED", node_id=node)
    assert {r["client_id"] for r in recovered} >= set(per_client)


def test_flapping_broker_goes_silent_and_returns_enough_times_within_the_window():
    k = k_of("flapping_broker")
    hbs = of("flapping_broker", "broker_heartbeat", broker_id=k)
    long_gaps = [(a["event_time"], b["event_time"]) for a, b in zip(hbs, hbs[1:])
                 if b["event_time"] - a["event_time"] > T + P]
    assert len(long_gaps) >= S.flapping_transitions // 2
    assert long_gaps[S.flapping_transitions // 2 - 1][1] - long_gaps[0][0] <= S.flapping_window_ms
    assert len({e["incarnation_id"] for e in hbs}) == 1


def test_cluster_silent_has_no_heartbeat_at_all_for_longer_than_the_timeout_then_all_return():
    hbs = of("cluster_silent", "broker_heartbeat")
    times = [e["event_time"] for e in hbs]
    silence = max(gaps(times))
    assert silence > T + P
    start = times[gaps(times).index(silence)]
    after = {e["broker_id"]: e["incarnation_id"] for e in hbs if e["event_time"] > start}
    before = {e["broker_id"]: e["incarnation_id"] for e in hbs if e["event_time"] <= start}
    assert after == before, "every broker comes back, same incarnations"
    assert not [u for u in of("cluster_silent", "metadata_update") if start < u["event_time"] < start + silence]


def test_stuck_stopping_heartbeats_stopping_past_the_grace_then_returns_to_active():
    k = k_of("stuck_stopping")
    hbs = of("stuck_stopping", "broker_heartbeat", broker_id=k)
    stopping = [e["event_time"] for e in hbs if e["target_state"] == "STOPPING"]
    assert stopping[-1] - stopping[0] > S.stopping_grace_ms
    assert max(gaps(stopping)) < T and hbs[-1]["target_state"] == "ACTIVE"


def test_broker_not_returned_shuts_down_and_stays_away_past_the_grace():
    result = scenario("broker_not_returned")
    k = k_of("broker_not_returned")
    hbs = of("broker_not_returned", "broker_heartbeat", broker_id=k)
    assert hbs[-1]["target_state"] == "STOPPING"
    assert result.truth.end_ms - hbs[-1]["event_time"] > S.not_returned_grace_ms


def test_commit_epoch_regression_commits_below_the_previous_epoch_once():
    last, regressions = {}, []
    for c in of("commit_epoch_regression", "offset_commit"):
        key = (c["group_id"], c["topic"], c["partition"])
        if key in last and c["metadata_epoch"] < last[key]:
            regressions.append(c)
        last[key] = c["metadata_epoch"]
    assert len(regressions) == 1
    labels = dict(scenario("commit_epoch_regression").truth.expected[0].labels)
    assert (regressions[0]["group_id"], regressions[0]["topic"], str(regressions[0]["partition"])) == (
        labels["group_id"], labels["topic"], labels["partition"])


def test_warm_up_covers_two_timeouts_and_one_metadata_max_age():
    assert warmup_ms(S) >= max(2 * T, S.metadata_max_age_ms)
    assert warmup_ms(scenario_settings(metadata_max_age_ms=120_000)) >= 120_000
