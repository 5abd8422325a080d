"""SASL passed through to every Kafka client epochwatch runs, against a real broker that asks for
it (SASL_PLAINTEXT, PLAIN): the job's source, sinks and dead letters (`kafka.client`), and the
collector watching the cluster (`collect.client`) and publishing its events (`kafka.client`).
A wrong password fails at once, names the settings to fix and never shows the password."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from streaming.tools.kafka_cluster import KafkaCluster
from tests.integration.faults.support import job_on_fresh_topics
from tests.integration.hostile.support import dead_letter_headers, produce_raw, run_to_exit, write_events
from tests.support.builders import hb

pytestmark = [pytest.mark.integration]

USER, PASSWORD = "epochwatch", "s3cret-Pa55word"
T0 = 1_767_225_600_000


def sasl(password: str = PASSWORD) -> dict[str, str]:
    """librdkafka's names, as a user puts them under kafka.client / collect.client."""
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": USER,
            "sasl.password": password}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Every broker listens twice: plaintext (to create topics) and SASL (what the tests use)."""
    with KafkaCluster(tmp_path_factory.mktemp("sasl"), controllers=1, brokers=1, sasl_users={USER: PASSWORD}) as c:
        yield c


@pytest.mark.spark
def test_the_job_reads_writes_and_dead_letters_through_sasl(cluster, tmp_path):
    """`epochwatch run` with only the SASL listener: events in, an alert and a dead letter out."""
    config, topics = job_on_fresh_topics(cluster.bootstrap_servers, tmp_path, "sasl",
                                         kafka={"bootstrap.servers": cluster.sasl_bootstrap_servers,
                                                "client": sasl()},
                                         rules={"controller.heartbeat.timeout.ms": 3000,
                                                "heartbeat.timeout.pending.ms": 600,
                                                "broker.heartbeat.interval.ms": 500})
    beats = [hb(T0 + i * 500, b) for i in range(20) for b in (1, 2) if b == 1 or i < 4]  # broker 2 goes quiet
    write_events(cluster.sasl_bootstrap_servers, topics["events"], beats, **sasl())
    produce_raw(cluster.sasl_bootstrap_servers, topics["events"], [(b"c/broker-9", b"not avro")], **sasl())

    code, job = run_to_exit(config, tmp_path / "job.log")
    log = job.log()
    assert code == 0, log[-3000:]
    assert PASSWORD not in log
    alerts = _read_alerts(cluster.sasl_bootstrap_servers, topics["alerts"])
    assert ("BrokerHeartbeatTimeout", "2") in {(a["alertname"], a["labels"].get("broker_id")) for a in alerts}
    [letter] = dead_letter_headers(cluster.bootstrap_servers, topics["dlq"], 1)
    assert letter["epochwatch.dlq.reason"] == "bad_magic_byte"


def _read_alerts(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[dict]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from udfs import avro_codec

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"sasl-{time.time_ns()}", **sasl()})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    alerts, deadline = [], time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and not any(a["alertname"] == "BrokerHeartbeatTimeout" for a in alerts):
            alerts += [avro_codec.decode(m.value()) for m in consumer.consume(100, 0.5) if m.error() is None]
    finally:
        consumer.close()
    return alerts


def test_a_wrong_password_fails_the_source_at_once_naming_the_settings(cluster):
    """Not retried as if the broker were away: a wrong password is no outage."""
    from udfs.kafka_options import parse_source_options
    from udfs.kafka_retry import KafkaClientError
    from udfs.kafka_source import KafkaStreamReader

    options = {"kafka.bootstrap.servers": cluster.sasl_bootstrap_servers, "subscribe": "anything",
               **{f"kafka.{k}": v for k, v in sasl("wrong-Pa55word").items()}}
    source = KafkaStreamReader(parse_source_options(options))
    started = time.monotonic()
    with pytest.raises(KafkaClientError) as failure:
        source.initialOffset()
    failed_after_s = time.monotonic() - started
    source.stop()
    message = str(failure.value)
    assert "kafka.sasl.username / kafka.sasl.password" in message, message
    assert "wrong-Pa55word" not in message
    assert failed_after_s < 30, f"took {failed_after_s:.1f} s: retried as if Kafka were unreachable"


def test_the_collector_watches_and_publishes_through_sasl(cluster, tmp_path):
    """`epochwatch collect` on the SASL listener only: the broker's heartbeats are derived (from
    DescribeCluster and the exporter) and published; the password is in no line it prints."""
    import yaml

    from streaming.tools.embedded import create_topics

    events_topic = f"sasl-collect-{tmp_path.name[-10:]}"
    create_topics(cluster.bootstrap_servers, {events_topic: 1})
    config = tmp_path / "epochwatch.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap.servers": cluster.sasl_bootstrap_servers, "topics": {"events": events_topic},
                  "client": sasl()},
        "collect": {"bootstrap.servers": cluster.sasl_bootstrap_servers, "client": sasl(), "metrics.port": 0,
                    "interval.ms": 1000,
                    "exporter.urls": ",".join(cluster.metrics_urls[n] for n in sorted(cluster.metrics_urls))},
    }))
    events_out = tmp_path / "events.jsonl"
    done = subprocess.run([sys.executable, "-m", "streaming.commands", "collect",
                           "--config", str(config), "--rounds", "4",
                           "--events-out", str(events_out)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert PASSWORD not in done.stdout + done.stderr
    events = [json.loads(line) for line in events_out.read_text().splitlines()]
    assert {(e["event_type"], e.get("broker_id")) for e in events} >= {("broker_heartbeat", 1)}
    failures = [e for e in events if e["event_type"] == "metadata_request_failed"]
    assert not failures, failures[:3]


def _commit_log_collector(cluster, password: str):
    from streaming import config as config_module
    from streaming.collect.collector import Collector

    settings = config_module.load(None, {"collect.bootstrap.servers": cluster.sasl_bootstrap_servers,
                                         "collect.offset.commits": "on", "collect.metrics.port": 0,
                                         **{f"collect.client.{k}": v for k, v in sasl(password).items()}})
    return Collector(settings, publisher=None)


def test_the_commit_log_reader_reads_through_sasl(cluster):
    """collect.client reaches the commit log's JVM in the Java client's names: with only the SASL
    listener, a commit made on the cluster comes out as an offset_commit event."""
    from confluent_kafka import Consumer, TopicPartition

    from streaming.tools.embedded import create_topics
    from tests.support.polling import wait_until

    create_topics(cluster.bootstrap_servers, {"sasl-commits": 1})
    collector, events = _commit_log_collector(cluster, PASSWORD), []

    def committed_and_seen():
        consumer = Consumer({"bootstrap.servers": cluster.sasl_bootstrap_servers, "group.id": "sasl-app", **sasl()})
        consumer.commit(offsets=[TopicPartition("sasl-commits", 0, 3, leader_epoch=0)], asynchronous=False)
        consumer.close()
        events.extend(collector.run_round()[0])
        return [e for e in events if e["event_type"] == "offset_commit" and e["group_id"] == "sasl-app"]

    try:
        [first, *_] = wait_until(committed_and_seen, 90, interval_s=1.0, what="a commit read through SASL")
    finally:
        collector.close()
    assert (first["topic"], first["partition"], first["offset"], first["metadata_epoch"]) == ("sasl-commits", 0, 3, 0)


def test_a_wrong_password_stops_the_commit_log_reader_not_the_collector(cluster):
    """The JVM gives up on an authentication failure; the collector goes on, says why in its
    status line (without the password) and starts the reader again after a backoff."""
    from tests.support.polling import wait_until

    collector = _commit_log_collector(cluster, "wrong-Pa55word")
    try:
        wait_until(lambda: collector.run_round() and collector.commit_log.restarts >= 1, 90, interval_s=0.5,
                   what="the reader's exit seen")
        _, report = collector.run_round()
    finally:
        collector.close()
    assert "last exit: exit " in report.commits and "Authentication failed" in report.commits, report.commits
    assert "wrong-Pa55word" not in report.commits
