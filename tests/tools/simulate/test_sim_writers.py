"""Message keys (docs/CONTRACTS.md), the producer's settings and the JSON Lines file writer."""

from __future__ import annotations

import time

import pytest

from streaming import events
from streaming.tools.simulate import run_scenario
from streaming.tools.simulate.writers import KafkaEventWriter, event_key, producer_config, write_jsonl_file

BASE = {"event_id": "e", "cluster_id": "cluster-a", "event_time": 1}

# (case, event, key, why)
KEY_CASES = [
    (1, {**BASE, "event_type": "broker_heartbeat", "broker_id": 3}, "cluster-a/broker-3",
     "a broker's heartbeats stay in order in one partition"),
    (2, {**BASE, "event_type": "metadata_update", "broker_id": 3}, "cluster-a/broker-3",
     "updates go with the same broker's heartbeats"),
    (3, {**BASE, "event_type": "metadata_response", "client_id": "app-1", "broker_id": 3}, "cluster-a/client-app-1",
     "a response belongs to the client that received it, not to the broker that answered"),
    (4, {**BASE, "event_type": "metadata_request_failed", "client_id": "app-1"}, "cluster-a/client-app-1", "client"),
    (5, {**BASE, "event_type": "client_rebootstrap", "client_id": "app-1"}, "cluster-a/client-app-1", "client"),
    (6, {**BASE, "event_type": "connection_attempt", "client_id": "app-1", "node_id": 9}, "cluster-a/client-app-1",
     "a connection attempt is the client's, whatever node it targets"),
    (7, {**BASE, "event_type": "offset_commit", "group_id": "billing"}, "cluster-a/group-billing",
     "a group's commits stay in order"),
    (8, {**BASE, "event_type": "alert", "fingerprint": "ab12"}, "ab12", "alerts are keyed by their incident id"),
    (9, {**BASE, "event_type": "cluster_reset"}, "cluster-a/cluster", "a reset is the whole cluster's"),
]


@pytest.mark.parametrize("case,event,key,why", KEY_CASES, ids=[f"case{c[0]}" for c in KEY_CASES])
def test_event_key(case, event, key, why):
    assert event_key(event) == key, f"case {case}: {why}"


def test_every_event_type_has_a_key_rule():
    assert {c[1]["event_type"] for c in KEY_CASES} == set(events.EVENT_TYPES)


def test_producer_is_idempotent_acks_all_lz4_batched_and_client_settings_win():
    conf = producer_config("127.0.0.1:9092", {"security.protocol": "SASL_SSL", "linger.ms": "5"})
    assert conf["enable.idempotence"] is True and conf["acks"] == "all" and conf["compression.type"] == "lz4"
    assert conf["security.protocol"] == "SASL_SSL" and conf["linger.ms"] == "5"
    assert producer_config("h:1")["linger.ms"] > 0


def test_jsonl_file_round_trips(tmp_path):
    evs = run_scenario("wrong_cluster_rebootstrap").events
    path = tmp_path / "events.jsonl"
    assert write_jsonl_file(evs, path) == len(evs)
    with path.open() as f:
        assert list(events.read_jsonl(f)) == evs


# KafkaEventWriter.close: its delivery callback keeps the client in a reference cycle, which
# would log connection failures after the broker is gone until a garbage collection finds it.
def test_close_with_nothing_queued_returns_at_once_and_twice_is_harmless():
    writer = KafkaEventWriter("127.0.0.1:9", "events", progress=None)  # nothing listens: nothing to send
    started = time.monotonic()
    writer.close()
    writer.close()
    assert time.monotonic() - started < 5
    assert writer._producer is None, "the client is released, not kept until a garbage collection"


def test_a_writer_used_as_a_context_manager_releases_its_client_on_exit():
    """Why: every loader (demo, benchmarks, tests) writes then lets the broker go; the client
    must be gone by then, not whenever a garbage collection finds it."""
    with KafkaEventWriter("127.0.0.1:9", "events", progress=None) as writer:
        assert writer._producer is not None
    assert writer._producer is None
