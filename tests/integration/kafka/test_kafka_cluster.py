"""The local Apache Kafka KRaft cluster (streaming.tools.kafka_cluster): each operation against
real JVMs, its effect observed from outside as a monitor would see it (client metadata, the
nodes' JMX exporters, their logs). Kafka's own timers stay the defaults (heartbeat 2 s, session
9 s), so fencing takes ~9 s."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient

from streaming.tools.kafka_cluster import KafkaClusterError, kafka_classpath, scrape
from streaming.tools.relay import Relay
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

# BrokerRegistrationState on the active controller; BrokerState on a broker
FENCED, ACTIVE = 10, 30
STARTING, RUNNING = 1, 3
FENCING_S = 30  # session 9 s, with room for a loaded CI machine


def metric(url: str, name: str, **labels) -> float | None:
    """One sample's value from a node's exporter; None if absent or the node does not answer."""
    try:
        samples = scrape(url)
    except OSError:
        return None
    wanted = {k: str(v) for k, v in labels.items()}
    return next((s.value for s in samples if s.name == name and wanted.items() <= s.labels.items()), None)


def registration(cluster, broker_id: int) -> float | None:
    """The active controller's view of a broker (the per-broker gauge lives on the active one)."""
    return metric(cluster.metrics_urls[cluster.active_controller_id()],
                  "kafka_controller_kafkacontroller_brokerregistrationstate", broker=broker_id)


def start_time(cluster, node_id: int) -> float | None:
    return metric(cluster.metrics_urls[node_id], "kafka_server_appinfo_start_time_ms", id=node_id)


def brokers_listed_by(cluster, asked: int) -> set[int]:
    """The brokers in the metadata one broker serves. A fresh client bootstrapped at that broker
    alone may still send its request to a broker it has just learned of: ask until it is asked."""
    def ask():
        md = AdminClient({"bootstrap.servers": cluster.client_address(asked)}).list_topics(timeout=10)
        return set(md.brokers) if md.orig_broker_id == asked else None
    return wait_until(ask, timeout_s=30, interval_s=0.2, what=f"metadata from broker {asked}")


def listed_by(cluster, asked: int, broker_id: int) -> bool:
    return broker_id in brokers_listed_by(cluster, asked)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for a reaper (this sandbox's pid 1 may never reap it)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in next(line for line in f if line.startswith("State:"))
    except FileNotFoundError:
        return False


# --- the shared cluster: tests that leave it as they found it ---------------------------------

def test_every_node_exports_the_kraft_lifecycle_gauges_the_collector_reads(kafka_cluster):
    """Why: the collector parses exactly these names and labels (deploy/kafka/jmx-exporter.yaml)."""
    c = kafka_cluster
    [controller] = c.controller_ids
    url = c.metrics_urls[controller]
    for b in c.broker_ids:
        assert metric(url, "kafka_controller_kafkacontroller_brokerregistrationstate", broker=b) == ACTIVE
        assert metric(url, "kafka_controller_kafkacontroller_timesincelastheartbeatreceivedms", broker=b) < 9000
    assert metric(url, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert metric(url, "kafka_server_raftmetrics_current_state", current_state="leader") == 1
    for node_id in [controller, *c.broker_ids]:
        url = c.metrics_urls[node_id]
        assert metric(url, "kafka_server_raftmetrics_current_leader") == controller
        assert metric(url, "kafka_server_raftmetrics_current_epoch") >= 1
        assert metric(url, "kafka_server_raftmetrics_high_watermark") > 0
        assert metric(url, "kafka_server_metadataloader_currentcontrollerid") == controller
        assert start_time(c, node_id) > 1.7e12  # epoch milliseconds
    for b in c.broker_ids:
        url = c.metrics_urls[b]
        assert metric(url, "kafka_server_kafkaserver_brokerstate") == RUNNING
        assert metric(url, "kafka_server_raftmetrics_current_state", current_state="observer") == 1
        assert metric(url, "kafka_server_brokermetadatametrics_last_applied_record_offset") > 0
        assert metric(url, "kafka_server_brokermetadatametrics_last_applied_record_timestamp") > 1.7e12
        assert metric(url, "kafka_server_brokermetadatametrics_last_applied_record_lag_ms") >= 0


def test_a_paused_broker_is_fenced_and_unfenced_on_resume_as_the_same_process(kafka_cluster):
    c, b = kafka_cluster, 3
    started = start_time(c, b)
    c.pause(b)
    try:
        wait_until(lambda: registration(c, b) == FENCED, timeout_s=FENCING_S, interval_s=0.5, what="fenced")
        assert not listed_by(c, 1, b)
        # the controller's heartbeat clock for it saturates at the session timeout
        assert metric(c.metrics_urls[3000], "kafka_controller_kafkacontroller_timesincelastheartbeatreceivedms",
                      broker=b) >= 9000
        assert metric(c.metrics_urls[b], "kafka_server_kafkaserver_brokerstate") is None  # it cannot answer
    finally:
        c.resume(b)
    wait_until(lambda: registration(c, b) == ACTIVE, timeout_s=FENCING_S, interval_s=0.5, what="unfenced")
    wait_until(lambda: listed_by(c, 1, b), timeout_s=FENCING_S, interval_s=0.5, what="listed again")
    assert start_time(c, b) == started  # a pause, not a restart


def test_a_broker_cut_off_from_the_controllers_is_fenced_while_its_clients_still_get_metadata(kafka_cluster):
    c, b = kafka_cluster, 2
    c.cut_controller_link(b)
    try:
        wait_until(lambda: registration(c, b) == FENCED, timeout_s=FENCING_S, interval_s=0.5, what="fenced")
        wait_until(lambda: not listed_by(c, 1, b), timeout_s=FENCING_S, interval_s=0.5, what="unlisted by broker 1")
        # the broker still answers its clients, from metadata it no longer gets fresh
        assert listed_by(c, b, b)
        assert metric(c.metrics_urls[b], "kafka_server_kafkaserver_brokerstate") == RUNNING  # it does not know
        assert metric(c.metrics_urls[b], "kafka_server_brokermetadatametrics_last_applied_record_lag_ms") > 5000
    finally:
        c.heal_controller_link(b)
    wait_until(lambda: registration(c, b) == ACTIVE, timeout_s=FENCING_S, interval_s=0.5, what="unfenced")
    wait_until(lambda: listed_by(c, 1, b), timeout_s=FENCING_S, interval_s=0.5, what="listed again")
    # Why the relays hold: every controller address the broker ever learned is one of its relays
    # (with the controllers' real ports advertised it reconnected past the relay: kafka_cluster.py)
    learned = set(map(int, re.findall(r"ListenerName\(RELAYED_\d+\)=127\.0\.0\.1/<unresolved>:(\d+)",
                                      c.log_path(b).read_text())))
    assert learned and learned <= {relay.port for relay in c.node(b).relays.values()}


# --- clusters of a test's own: destructive operations -----------------------------------------

def test_a_killed_broker_restarts_as_a_new_process_and_rejoins(kafka_cluster_factory):
    c = kafka_cluster_factory(brokers=1)
    before = start_time(c, 1)
    c.kill(1)
    assert c.pid(1) is None
    c.restart(1)  # waits until it runs, registered again once the old session expired
    assert start_time(c, 1) > before
    assert registration(c, 1) == ACTIVE and listed_by(c, 1, 1)


def test_a_shut_down_broker_exits_after_a_controlled_shutdown(kafka_cluster_factory):
    c = kafka_cluster_factory(brokers=1)
    code = c.shutdown(1)
    assert code == 128 + signal.SIGTERM  # the JVM's code for SIGTERM once its shutdown hooks ran
    log = c.log_path(1).read_text()
    assert "[BrokerServer id=1] Transition from SHUTTING_DOWN to SHUTDOWN" in log
    assert "[BrokerServer id=1] shut down completed" in log
    assert registration(c, 1) == FENCED  # the controller fenced it on request, not by timeout


def test_a_duplicate_broker_is_refused_while_the_first_lives_and_stop_ends_both(kafka_cluster_factory):
    c = kafka_cluster_factory(brokers=1)
    before = start_time(c, 1)
    duplicate = c.start_duplicate(1)
    refused = "Unable to register broker 1 because the controller returned error DUPLICATE_BROKER_REGISTRATION"
    wait_until(lambda: duplicate.log_path.exists() and refused in duplicate.log_path.read_text(),
               timeout_s=60, interval_s=0.5, what="the duplicate's refused registration")
    assert metric(duplicate.metrics_url, "kafka_server_kafkaserver_brokerstate") == STARTING
    assert start_time(c, 1) == before and registration(c, 1) == ACTIVE and listed_by(c, 1, 1)
    pids = [c.pid(n) for n in c.metrics_urls] + [duplicate.pid]
    c.stop()
    assert not [pid for pid in pids if alive(pid)]


def test_stopping_the_active_controller_elects_another(kafka_cluster_factory):
    c = kafka_cluster_factory(controllers=3, brokers=1)
    old = c.active_controller_id()
    epoch = metric(c.metrics_urls[old], "kafka_server_raftmetrics_current_epoch")
    assert c.stop_active_controller() == old

    def another_leader():
        leader = c.active_controller_id()
        return leader if leader not in (None, old) else None

    new = wait_until(another_leader, timeout_s=30, interval_s=0.5, what="a new leader")
    for node_id in [n for n in c.controller_ids if n != old] + c.broker_ids:
        url = c.metrics_urls[node_id]
        wait_until(lambda: metric(url, "kafka_server_raftmetrics_current_leader") == new, timeout_s=30,
                   interval_s=0.5, what=f"node {node_id} following {new}")
        assert metric(url, "kafka_server_raftmetrics_current_epoch") > epoch


def test_the_jvms_die_with_the_python_process_that_started_them(tmp_path):
    """Why: a test run killed by SIGKILL (a CI timeout) runs no stop(); six JVMs would stay."""
    starter = subprocess.Popen(
        [sys.executable, "-c", "import json, sys, time\nfrom streaming.tools.kafka_cluster import KafkaCluster\n"
         f"c = KafkaCluster({str(tmp_path)!r}, brokers=1).start()\n"
         "print(json.dumps([c.pid(n) for n in c.metrics_urls]), flush=True)\ntime.sleep(600)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(starter.stdout.readline())
        assert len(pids) == 2 and all(alive(pid) for pid in pids)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        wait_until(lambda: not any(alive(pid) for pid in pids), timeout_s=15, what="the JVMs gone")
    finally:
        starter.kill()


# --- no Kafka needed ----------------------------------------------------------------------------

def test_a_missing_jar_cache_names_the_set_up_command(tmp_path, monkeypatch):
    monkeypatch.setenv("EPOCHWATCH_KAFKA_LIB", str(tmp_path))
    with pytest.raises(KafkaClusterError, match=r"deploy/local/dev setup"):
        kafka_classpath()


def test_a_cut_relay_holds_connections_silently_and_heal_drops_them():
    """Why: a blackhole, not a refusal: the broker must see timeouts, as on a partitioned network."""
    server = socket.create_server(("127.0.0.1", 0))
    relay = Relay(server.getsockname()[:2])
    try:
        before = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        upstream, _ = server.accept()
        relay.cut()
        during = socket.create_connection(("127.0.0.1", relay.port), timeout=5)  # accepted, then held
        # the kernel completes the connect before the relay's thread takes it: a take after heal()
        # would forward it, so the checks below wait for the relay to hold it
        wait_until(lambda: len(relay._conns) == 3, timeout_s=10, what="the relay holding the new connection")
        before.sendall(b"ping")
        upstream.settimeout(0.5)
        with pytest.raises(TimeoutError):
            upstream.recv(4)  # nothing forwarded
        for held in (before, during):
            held.settimeout(0.5)
            with pytest.raises(TimeoutError):
                held.recv(4)  # and nothing closed
        relay.heal()
        before.settimeout(5)
        during.settimeout(5)
        assert before.recv(4) == b"" and during.recv(4) == b""  # dropped on heal
        after = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        after.sendall(b"pong")
        forwarded, _ = server.accept()
        forwarded.settimeout(5)
        assert forwarded.recv(4) == b"pong"
    finally:
        relay.close()
        server.close()
