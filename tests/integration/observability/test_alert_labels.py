"""sinks.labels end to end: the labels a team configures arrive in the real Alertmanager and in the
alerts topic on a real Kafka broker, the same in both; the rules' fingerprints stay."""

from __future__ import annotations

import time

import pytest
import requests

from streaming import config
from streaming.rules.catalog import RULES, alert_record
from streaming.sinks import AlertmanagerSink
from streaming.sinks.base import OutputBatch
from streaming.sinks.kafka import KafkaOutputSink
from streaming.tools.demo import read_topic
from tests.support.polling import wait_until
from udfs import avro_codec

pytestmark = pytest.mark.integration

PAYMENTS = "MkU3OEVBNTcwNTJENDM2Qg"     # a Kafka cluster id, with an alias
ORDERS = "4L6g3nShT-eMCtK--X86sw"       # another, without


def emitted(alertname: str, cluster_id: str, **entity) -> dict:
    """A record as the rules emit it."""
    now = int(time.time() * 1000)
    return alert_record(RULES[alertname], cluster_id, tuple(sorted((k, str(v)) for k, v in entity.items())),
                        "firing", now, now, f"{alertname} in {cluster_id}")


def active(am) -> list[dict]:
    return requests.get(am.url + "/api/v2/alerts", timeout=5).json()


def test_configured_labels_arrive_in_alertmanager_and_the_alerts_topic_alike(alertmanager, webhook, broker,
                                                                            topic_factory):
    topic = topic_factory(prefix="alerts")
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.topics.alerts": topic,
        "sinks.labels.static.team": "kafka", "sinks.labels.static.env": "prod",
        "sinks.labels.static.cluster": "k8s-eu-1",          # the platform's own cluster label, kept apart
        f"sinks.labels.aliases.{PAYMENTS}": "payments-prod"})
    records = [emitted("BrokerMetadataLag", PAYMENTS, broker_id=3), emitted("ClusterSilent", ORDERS)]
    batch = OutputBatch(0, alerts=records)
    kafka_sink = KafkaOutputSink(settings)
    am_sink = AlertmanagerSink(alertmanager.url, labels=settings.sinks.labels, timeout_s=2, backoff_max_s=1)
    try:
        kafka_sink.write(batch)
        am_sink.write(batch)
        in_alertmanager = wait_until(lambda: len(active(alertmanager)) == 2 and active(alertmanager), timeout_s=10,
                                     what="both alerts in Alertmanager")
    finally:
        kafka_sink.close()
        am_sink.close(timeout_s=5)
    in_topic = [avro_codec.decode(m.value()) for m in read_topic(broker.bootstrap_servers, topic, 2)]

    platform = {"team": "kafka", "env": "prod", "cluster": "k8s-eu-1"}
    expected = {
        "BrokerMetadataLag": ({"alertname": "BrokerMetadataLag", "severity": "critical", "broker_id": "3",
                               "kafka_cluster": PAYMENTS, "kafka_cluster_alias": "payments-prod", **platform},
                              "payments-prod: Broker 3 serves metadata behind the controller"),
        "ClusterSilent": ({"alertname": "ClusterSilent", "severity": "critical", "kafka_cluster": ORDERS, **platform},
                          f"No broker heartbeat from cluster {ORDERS}"),
    }
    assert {a["labels"]["alertname"]: (a["labels"], a["annotations"]["summary"]) for a in in_alertmanager} == expected
    assert {r["alertname"]: (r["labels"], r["annotations"]["summary"]) for r in in_topic} == expected
    # the incident ids are the rules' own: a restart matches them against what it reads back
    assert sorted((r["fingerprint"], r["event_id"]) for r in in_topic) == sorted(
        (r["fingerprint"], r["event_id"]) for r in records)
    # routing reads the labels as configured: critical pages, grouped by the Kafka cluster
    wait_until(lambda: {labels["alertname"] for _, labels in webhook.alerts("/pager")} == set(expected),
               timeout_s=15, what="both alerts paged")
    groups = requests.get(alertmanager.url + "/api/v2/alerts/groups", timeout=5).json()
    assert sorted(g["labels"]["kafka_cluster"] for g in groups) == sorted([PAYMENTS, ORDERS])


def test_a_restart_labels_again_what_an_earlier_version_wrote(alertmanager):
    """The alerts topic of an upgraded job holds records labelled `cluster` (as the rules emit
    them). Seeded as they are, their resolution (labelled kafka_cluster) would reach another
    Alertmanager alert, and the old one would stay open until it expires."""
    old = emitted("BrokerHeartbeatTimeout", ORDERS, broker_id=2)
    assert old["labels"]["cluster"] == ORDERS
    sink = AlertmanagerSink(alertmanager.url, timeout_s=2, backoff_max_s=1)
    try:
        sink.seed([old])
        sink.flush()
        [alert] = wait_until(lambda: active(alertmanager), timeout_s=10, what="the seeded alert in Alertmanager")
        assert alert["labels"] == {"alertname": "BrokerHeartbeatTimeout", "severity": "warning", "broker_id": "2",
                                   "kafka_cluster": ORDERS}
        ended = int(time.time() * 1000)
        sink.add([{**old, "status": "resolved", "event_id": f"{old['fingerprint']}:resolved", "ends_at": ended,
                   "event_time": ended}])
        sink.flush()
        wait_until(lambda: active(alertmanager) == [], timeout_s=10, what="the seeded alert resolved")
    finally:
        sink.close(timeout_s=5)
