"""The client hook in real confluent-kafka clients against real Apache Kafka: what it publishes
about a healthy client, and a connection-setup timeout storm from clients whose bootstrap address
completes TCP and never answers, run through the rules."""

from __future__ import annotations

import socket
import time

import pytest
from confluent_kafka import Producer

from streaming.collect.client_hook import ClientHook
from streaming.config import RuleSettings
from streaming.demo import read_topic
from streaming.embedded import create_topics
from streaming.local import detect_all
from tests.helpers import wait_until
from udfs import avro_codec

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def cluster(kafka_cluster):
    return kafka_cluster   # the session's 1 + 3 cluster; these tests leave it as they found it


def published(bootstrap: str, topic: str, count: int) -> list[dict]:
    return [avro_codec.decode(m.value()) for m in read_topic(bootstrap, topic, count)]


def test_a_healthy_producer_reports_its_metadata_responses(cluster, topic_factory, tmp_path):
    """Every response: the node that answered, the cluster id and broker count it carried, and a
    metadata epoch that never goes down while nothing is stale."""
    topic = f"hook-{tmp_path.name[-10:]}"
    create_topics(cluster.bootstrap_servers, {topic: 6}, replication_factor=3)
    events_topic = f"hook-events-{tmp_path.name[-10:]}"
    create_topics(cluster.bootstrap_servers, {events_topic: 1})
    hook = ClientHook(cluster.bootstrap_servers, "watched", events_topic=events_topic)
    producer = Producer(hook.instrument({"bootstrap.servers": cluster.bootstrap_servers, "client.id": "orders-app",
                                         "topic.metadata.refresh.interval.ms": 1000}))
    for i in range(100):
        producer.produce(topic, b"order %d" % i)
    assert producer.flush(30) == 0
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:   # a few periodic refreshes
        producer.poll(0.2)
    wait_until(lambda: hook.published >= 3, timeout_s=10, what="three responses read")
    assert hook.close() == 0 and hook.dropped == 0

    events = published(cluster.bootstrap_servers, events_topic, hook.published)
    responses = [e for e in events if e["event_type"] == "metadata_response"]
    assert len(responses) >= 3
    assert {e["client_id"] for e in responses} == {"orders-app"}
    assert {e["cluster_id"] for e in responses} == {"watched"}
    assert {e["response_cluster_id"] for e in responses} == {cluster.cluster_id}
    assert {e["broker_count"] for e in responses} == {3}
    assert {e["broker_id"] for e in responses} <= {-1, *cluster.broker_ids}
    epochs = [e["metadata_epoch"] for e in responses]
    assert epochs == sorted(epochs) and epochs[0] >= 1
    assert not detect_all(events, RuleSettings(), until=max(e["event_time"] for e in events) + 60_000)


class SilentListener:
    """Completes TCP (the kernel's backlog) and never reads: a peer whose connection setup never
    finishes, as a hung broker or a black-holing load balancer."""

    def __init__(self):
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(64)
        self.address = f"127.0.0.1:{self._socket.getsockname()[1]}"

    def close(self) -> None:
        self._socket.close()


def test_clients_whose_connection_setup_times_out_raise_a_storm(broker, tmp_path):
    """Six clients, socket.connection.setup.timeout.ms 1 s, bootstrapped at a silent listener:
    each timeout is a connection_attempt SETUP_TIMEOUT, and together they are a storm."""
    events_topic = f"hook-storm-{tmp_path.name[-10:]}"
    create_topics(broker.bootstrap_servers, {events_topic: 1})
    silent = SilentListener()
    hook = ClientHook(broker.bootstrap_servers, "storm-cluster", events_topic=events_topic)
    clients = [Producer(hook.instrument({"bootstrap.servers": silent.address, "client.id": f"app-{i}",
                                         "socket.connection.setup.timeout.ms": 1000}))
               for i in range(6)]
    try:
        def timeouts() -> int:
            for client in clients:
                client.poll(0.05)
            return True
        wait_until(lambda: timeouts() and hook.published_by_type["connection_attempt"] >= 6 * 4, timeout_s=60,
                   what="four setup timeouts per client")
    finally:
        silent.close()
    assert hook.close() == 0 and hook.dropped == 0

    events = published(broker.bootstrap_servers, events_topic, hook.published)
    attempts = [e for e in events if e["event_type"] == "connection_attempt"]
    assert {(e["outcome"], e["node_id"], e["setup_timeout_ms"]) for e in attempts} == {("SETUP_TIMEOUT", -1, 1000)}
    assert {e["client_id"] for e in attempts} == {f"app-{i}" for i in range(6)}
    rules = RuleSettings(storm_min_timeouts=20, storm_min_clients=5)
    alerts = detect_all(events, rules, until=max(e["event_time"] for e in events) + 1_000)
    assert ("ConnectionSetupTimeoutStorm", "-1") in {(a["alertname"], a["labels"].get("node_id")) for a in alerts}


def _poll_until(clients, what: str, done, timeout_s: float = 90) -> None:
    def polled():
        for client in clients:
            client.poll(0.05)
        return done()
    wait_until(polled, timeout_s=timeout_s, interval_s=0.05, what=what)


def test_a_bootstrap_address_moved_to_another_cluster_raises_cluster_id_mismatch(kafka_cluster_factory, broker,
                                                                                   tmp_path):
    """The client bootstraps through an address (a relay: a DNS name, a load balancer) that is
    moved to another cluster while every broker it knew goes down: librdkafka rebootstraps
    (KIP-899) and gets metadata from the wrong cluster. The hook reports the rebootstrap and the
    answers; the rules raise ClusterIdMismatch, and no stale answers from the other cluster."""
    from streaming.tools.relay import Relay

    first = kafka_cluster_factory(controllers=1, brokers=1)
    relay = Relay(("127.0.0.1", first.node(1).port), name="bootstrap-dns")
    events_topic = f"hook-moved-{tmp_path.name[-10:]}"
    create_topics(broker.bootstrap_servers, {events_topic: 1})
    hook = ClientHook(broker.bootstrap_servers, events_topic=events_topic)   # the cluster id: learned
    client = Producer(hook.instrument({"bootstrap.servers": relay.address, "client.id": "moved-app",
                                       "topic.metadata.refresh.interval.ms": 1000}))
    try:
        _poll_until([client], "a first response", lambda: hook.published_by_type["metadata_response"] >= 1)
        relay.target = ("127.0.0.1", broker.node(1).port)   # the name now points at the other cluster
        relay.heal()
        first.kill(1)
        _poll_until([client], "a response from the other cluster after a rebootstrap",
                    lambda: hook.published_by_type["client_rebootstrap"] >= 1
                    and hook.published_by_type["metadata_response"] >= 3)
    finally:
        relay.close()
    assert hook.close() == 0

    events = published(broker.bootstrap_servers, events_topic, hook.published)
    [rebootstrap, *_] = [e for e in events if e["event_type"] == "client_rebootstrap"]
    assert rebootstrap["cluster_id_before"] == first.cluster_id
    answered = {e["response_cluster_id"] for e in events if e["event_type"] == "metadata_response"}
    assert answered == {first.cluster_id, broker.cluster_id}
    assert {e["cluster_id"] for e in events} == {first.cluster_id}, "one client, one cluster's state"
    alerts = detect_all(events, RuleSettings(), until=max(e["event_time"] for e in events) + 1_000)
    assert {(a["alertname"], a["status"]) for a in alerts} == {("ClusterIdMismatch", "firing")}


def test_a_client_that_finds_no_broker_is_rebootstrap_overdue(kafka_cluster_factory, broker, tmp_path):
    """Every broker the client knew is gone and its bootstrap address leads nowhere: no metadata
    for longer than the trigger (5 s in this test) is ClientRebootstrapOverdue."""
    from streaming.tools.relay import Relay

    gone = kafka_cluster_factory(controllers=1, brokers=1)
    relay = Relay(("127.0.0.1", gone.node(1).port), name="bootstrap-dns")
    events_topic = f"hook-overdue-{tmp_path.name[-10:]}"
    create_topics(broker.bootstrap_servers, {events_topic: 1})
    hook = ClientHook(broker.bootstrap_servers, "overdue", events_topic=events_topic)
    client = Producer(hook.instrument({"bootstrap.servers": relay.address, "client.id": "stranded-app"}))
    try:
        _poll_until([client], "a first response", lambda: hook.published_by_type["metadata_response"] >= 1)
        gone.kill(1)
        relay.heal()   # its target is gone: new connections are closed at once
        started = time.monotonic()
        _poll_until([client], "6 s without metadata", lambda: time.monotonic() - started >= 6)
        waited_until_ms = int(time.time() * 1000)
    finally:
        relay.close()
    assert hook.close() == 0

    events = published(broker.bootstrap_servers, events_topic, hook.published)
    assert "metadata_request_failed" in {e["event_type"] for e in events}
    rules = RuleSettings(rebootstrap_trigger_ms=5_000)
    alerts = detect_all(events, rules, until=waited_until_ms)
    assert ("ClientRebootstrapOverdue", "stranded-app") in {(a["alertname"], a["labels"].get("client_id"))
                                                             for a in alerts}


@pytest.mark.spark
def test_clients_of_a_broker_cut_off_from_the_controller_get_stale_metadata(kafka_cluster_factory, broker,
                                                                            tmp_path):
    """Three instrumented producers in one process, each bootstrapped at another broker of a
    1 + 3 cluster. Broker 2 is cut off from the controller: fenced, its partitions' leadership
    moves (new leader epochs), and it keeps answering the old ones. The clients that ask it for
    metadata are behind their neighbour: StaleMetadataResponse for broker 2, nothing else, from the
    rules and from `epochwatch run` over the hook's events."""
    from tests.integration.faults.support import JobProcess, job_on_fresh_topics
    from tests.integration.hostile.support import exit_code

    cluster = kafka_cluster_factory(controllers=1, brokers=3)
    create_topics(cluster.bootstrap_servers, {"orders": 6}, replication_factor=3)
    config, topics = job_on_fresh_topics(broker.bootstrap_servers, tmp_path, "hook-stale")
    events_topic = topics["events"]
    hook = ClientHook(broker.bootstrap_servers, events_topic=events_topic)
    clients = [Producer(hook.instrument({"bootstrap.servers": cluster.client_address(b), "client.id": f"app-on-{b}",
                                         "topic.metadata.refresh.interval.ms": 500}))
               for b in cluster.broker_ids]
    for client in clients:
        client.produce("orders", b"order")
        assert client.flush(30) == 0
    started = time.monotonic()
    _poll_until(clients, "3 s of healthy responses", lambda: time.monotonic() - started >= 3)
    cut_ms = int(time.time() * 1000)
    cluster.cut_controller_link(2)
    _poll_until(clients, "30 s cut off (fenced after ~9 s)", lambda: time.monotonic() - started >= 33, timeout_s=60)
    cluster.heal_controller_link(2)
    assert hook.close() == 0 and hook.dropped == 0

    events = published(broker.bootstrap_servers, events_topic, hook.published)
    alerts = detect_all(events, RuleSettings(), until=max(e["event_time"] for e in events))
    fired = {(a["alertname"], a["labels"].get("broker_id")) for a in alerts if a["status"] == "firing"}
    assert fired == {("StaleMetadataResponse", "2")}, alerts
    first = min(a["starts_at"] for a in alerts if a["status"] == "firing")
    assert first > cut_ms, "nothing stale before the cut"

    # the same events through the Spark job, to the alerts topic
    job = JobProcess(config, tmp_path / "job.log", ("--event-time", "--available-now")).start()
    try:
        assert exit_code(job, timeout_s=300) == 0, job.log()[-3000:]
    finally:
        job.stop(timeout_s=20)
    records = published(broker.bootstrap_servers, topics["alerts"], len(alerts))
    assert {(r["alertname"], r["labels"].get("broker_id")) for r in records if r["status"] == "firing"} == fired
    assert {r["labels"]["client_id"] for r in records} == {a["labels"]["client_id"] for a in alerts}
