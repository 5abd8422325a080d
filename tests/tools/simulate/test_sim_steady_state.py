"""The simulator's steady state: deterministic, ordered, valid events with the shape of a healthy
cluster (heartbeat cadence, +1 metadata epochs applied by every broker, client refreshes, commits)."""

from __future__ import annotations

import io
import time
from collections import defaultdict

import pytest

from streaming import events
from streaming.config import RuleSettings
from streaming.tools.simulate import ClusterShape, SimulationError, scenario_settings, steady_state
from streaming.tools.simulate.writers import event_key

SETTINGS = scenario_settings()
SHAPE = ClusterShape(brokers=5, clients=30, groups=6)
DURATION = 120_000


def generate(seed: int = 1, shape: ClusterShape = SHAPE, settings: RuleSettings = SETTINGS) -> list[dict]:
    return list(steady_state(duration_ms=DURATION, shape=shape, settings=settings, seed=seed))


def as_jsonl(evs: list[dict]) -> bytes:
    buf = io.StringIO()
    events.write_jsonl(evs, buf)
    return buf.getvalue().encode()


@pytest.fixture(scope="module")
def steady() -> list[dict]:
    return generate()


def of(evs, event_type):
    return [e for e in evs if e["event_type"] == event_type]


def test_same_seed_gives_the_same_bytes_and_another_seed_does_not(steady):
    assert as_jsonl(generate(seed=1)) == as_jsonl(steady)
    assert as_jsonl(generate(seed=2)) != as_jsonl(steady)


def test_events_are_valid_unique_and_in_event_time_order(steady):
    assert [e["event_time"] for e in steady] == sorted(e["event_time"] for e in steady)
    assert all(events.normalize(e) == e for e in steady)  # canonical: every field, schema order
    ids = [e["event_id"] for e in steady]
    assert len(set(ids)) == len(ids) and ids[0] == "cluster-a-1-1"
    assert {e["event_type"] for e in steady} == set(events.INPUT_EVENT_TYPES) - {
        "metadata_request_failed", "client_rebootstrap",  # nothing fails in the steady state
        "cluster_reset"}  # an operator's control record, never telemetry


def test_each_broker_heartbeats_every_interval_to_the_controller(steady):
    interval = SETTINGS.broker_heartbeat_interval_ms
    by_broker = defaultdict(list)
    for e in of(steady, "broker_heartbeat"):
        by_broker[e["broker_id"]].append(e)
        assert (e["target_state"], e["current_state"], e["error_code"]) == ("ACTIVE", "ACTIVE", 0)
        assert (e["controller_id"], e["incarnation_id"] > 0) == (3000, True)
    assert sorted(by_broker) == [1, 2, 3, 4, 5]
    for beats in by_broker.values():
        gaps = [b["event_time"] - a["event_time"] for a, b in zip(beats, beats[1:])]
        assert all(abs(g - interval) <= interval // 50 for g in gaps)  # +-1% jitter each side
        assert len({b["incarnation_id"] for b in beats}) == 1


def test_every_broker_applies_each_metadata_epoch_once_in_increasing_order(steady):
    updates = of(steady, "metadata_update")
    epochs = sorted({u["metadata_epoch"] for u in updates})
    assert epochs == list(range(epochs[0], epochs[-1] + 1))  # +1 per update, no gaps
    per_epoch = defaultdict(list)
    for u in updates:
        per_epoch[u["metadata_epoch"]].append(u)
    for epoch, applied in list(per_epoch.items())[:-1]:  # the last one may be cut by the end
        assert sorted(u["broker_id"] for u in applied) == [1, 2, 3, 4, 5]
        spread = max(u["event_time"] for u in applied) - min(u["event_time"] for u in applied)
        assert spread <= SHAPE.max_apply_lag_ms
    assert [u["metadata_epoch"] for u in updates] == sorted(u["metadata_epoch"] for u in updates)


def test_clients_refresh_every_metadata_max_age_and_never_see_stale_metadata(steady):
    accepted, last_refresh = {}, {}
    for e in of(steady, "metadata_response"):
        cid = e["client_id"]
        assert e["metadata_epoch"] >= accepted.get(cid, -1), "a stale response in the steady state"
        assert (e["error_code"], e["broker_count"], e["response_cluster_id"]) == (0, 5, "cluster-a")
        if cid in last_refresh:
            assert e["event_time"] - last_refresh[cid] == SETTINGS.metadata_max_age_ms
        accepted[cid], last_refresh[cid] = e["metadata_epoch"], e["event_time"]
    assert len(accepted) == SHAPE.clients


def test_commits_carry_the_members_accepted_epoch_and_never_go_down(steady):
    accepted, last = {}, {}
    group_member = {f"group-{i:03d}": f"client-{i % SHAPE.clients:04d}" for i in range(SHAPE.groups)}
    for e in steady:
        if e["event_type"] == "metadata_response":
            accepted[e["client_id"]] = max(accepted.get(e["client_id"], -1), e["metadata_epoch"])
        elif e["event_type"] == "offset_commit":
            key = (e["group_id"], e["topic"], e["partition"])
            assert e["metadata_epoch"] == accepted[group_member[e["group_id"]]]
            assert key not in last or (e["metadata_epoch"], e["offset"]) >= last[key]
            last[key] = (e["metadata_epoch"], e["offset"])
    assert len(last) == SHAPE.groups * SHAPE.partitions_per_group


def test_connection_attempts_are_occasional_successes_with_a_kip601_timeout(steady):
    attempts = of(steady, "connection_attempt")
    responses = of(steady, "metadata_response")
    assert 0 < len(attempts) < len(responses) / 5
    base = SETTINGS.connection_setup_timeout_ms
    assert all(a["outcome"] == "CONNECTED" and a["consecutive_failures"] == 0 for a in attempts)
    assert all(base * 0.8 <= a["setup_timeout_ms"] <= base * 1.2 for a in attempts)


def test_per_entity_order_holds_within_each_kafka_key(steady):
    last = {}
    for e in steady:
        key = event_key(e)
        assert e["event_time"] >= last.get(key, 0)
        last[key] = e["event_time"]


@pytest.mark.parametrize("shape,param", [
    (ClusterShape(brokers=0), "--brokers"),
    (ClusterShape(clients=0), "--clients"),
    (ClusterShape(cluster_id=""), "--cluster-id"),
    (ClusterShape(max_apply_lag_ms=5000, metadata_update_interval_ms=3000), "max_apply_lag_ms"),
])
def test_bad_shapes_name_the_parameter(shape, param):
    with pytest.raises(SimulationError) as info:
        generate(shape=shape)
    assert info.value.param == param and info.value.fix


def test_generation_speed_floor():
    """The number we quote is >= 300k events/s (CPU time); this floor catches a regression
    without failing on a machine shared with other work."""
    stream = steady_state(duration_ms=600_000, shape=ClusterShape(brokers=50, clients=5000, groups=500),
                          settings=SETTINGS)
    started = time.process_time()
    count = sum(1 for _ in stream)
    rate = count / (time.process_time() - started)
    assert count > 300_000
    assert rate > 150_000, f"{rate:,.0f} events/s"
