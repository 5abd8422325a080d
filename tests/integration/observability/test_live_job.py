"""The live job (processing-time timers) against the real broker and the real Alertmanager: a
cluster that goes completely silent still raises ClusterSilent -- no data arrives, so only
wall-clock timers can notice -- and the alert reaches Alertmanager, which pages (critical)."""

import dataclasses
import threading
import time

import pytest
import requests

from streaming import config
from streaming.sinks.alertmanager import AlertmanagerSink
from streaming.sinks.kafka import KafkaOutputSink
from streaming.sinks.memory import MemorySink
from streaming.spark.job import start
from streaming.spark.pipeline import PROCESSING_TIME
from streaming.tools.embedded import create_topics
from streaming.tools.simulate.writers import KafkaEventWriter
from tests.support.builders import hb
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]
TIMEOUT_MS = 3000


def _heartbeats_until(stop: threading.Event, writer, sent: list):
    while not stop.is_set():
        now = int(time.time() * 1000)
        batch = []
        for broker in (1, 2, 3):
            ev = hb(0, broker)
            ev.update(event_time=now, cluster_id="live-cluster")
            batch.append(ev)
        writer.write(batch)
        sent.append(now)
        stop.wait(0.5)


def test_silent_cluster_pages_through_alertmanager(broker, spark, alertmanager, webhook, tmp_path):
    suffix = tmp_path.name[-12:]
    settings = config.load(overrides={
        "kafka.bootstrap.servers": broker.bootstrap_servers, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": f"live-ev-{suffix}", "kafka.topics.alerts": f"live-al-{suffix}",
        "kafka.topics.dlq": f"live-dlq-{suffix}",
        "rules.controller.heartbeat.timeout.ms": TIMEOUT_MS, "rules.broker.heartbeat.interval.ms": 500,
        "rules.heartbeat.timeout.pending.ms": 600})
    settings = dataclasses.replace(settings, checkpoint_location=str(tmp_path / "ckpt"),
                                   trigger_interval="500 milliseconds")
    k = settings.kafka
    create_topics(broker.bootstrap_servers, {k.events_topic: 2, k.alerts_topic: 1, k.dlq_topic: 1})
    memory, kafka_sink = MemorySink(), KafkaOutputSink(settings)
    am = AlertmanagerSink(alertmanager.url, resend_interval_s=1)
    query = start(spark, settings, [kafka_sink, am, memory], time_mode=PROCESSING_TIME,
                  query_name=f"live-{suffix}")
    stop, sent = threading.Event(), []
    writer = KafkaEventWriter(broker.bootstrap_servers, k.events_topic, progress=None)
    producer = threading.Thread(target=_heartbeats_until, args=(stop, writer, sent))
    producer.start()
    try:
        wait_until(lambda: any(s["state"] == "ACTIVE" for s in memory.all("broker_status")), timeout_s=120,
                   what="the job to see the brokers ACTIVE")
        stop.set()
        producer.join()
        last_heartbeat = sent[-1]
        silent = wait_until(lambda: [a for a in memory.all("alerts") if a["alertname"] == "ClusterSilent"],
                            timeout_s=60, what="ClusterSilent from wall-clock timers on a silent stream")
        assert silent[0]["status"] == "firing" and silent[0]["severity"] == "critical"
        assert silent[0]["starts_at"] == last_heartbeat + TIMEOUT_MS  # silence starts where the timeout ends
        assert not [a for a in memory.all("alerts") if a["alertname"] == "BrokerHeartbeatTimeout"]

        def in_alertmanager():
            body = requests.get(f"{alertmanager.url}/api/v2/alerts", timeout=2).json()
            return [a for a in body if a["labels"]["alertname"] == "ClusterSilent"
                    and a["labels"]["kafka_cluster"] == "live-cluster"]
        wait_until(in_alertmanager, timeout_s=30, what="ClusterSilent in Alertmanager")
        wait_until(lambda: webhook.alerts("/pager"), timeout_s=30, what="the critical page on the pager receiver")
    finally:
        stop.set()
        producer.join()
        writer.close()
        query.stop()
        am.close()
        kafka_sink.close()
