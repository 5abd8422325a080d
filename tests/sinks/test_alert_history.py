"""The alert history read (streaming.sinks.alert_history) on real Apache Kafka: records are decoded
as the sink wrote them, whatever kafka.encoding is, and what it cannot use is said once."""

from __future__ import annotations

import logging
import time

from streaming import config
from streaming.sinks.alert_history import read_alert_history
from streaming.sinks.base import OutputBatch
from streaming.sinks.kafka import KafkaOutputSink


def alert(fp: str, status: str, at: int) -> dict:
    return {"event_type": "alert", "event_id": f"{fp}:{status}", "cluster_id": "c1", "event_time": at,
            "fingerprint": fp, "alertname": "BrokerHeartbeatTimeout", "severity": "critical", "status": status,
            "labels": {"broker_id": fp, "cluster": "c1"}, "annotations": {"summary": fp},
            "starts_at": at - 10_000, "ends_at": at if status == "resolved" else None}


def test_schemaless_alert_records_are_read_back_and_foreign_records_counted_once(broker, topic_factory, caplog):
    """Why: with kafka.encoding schemaless the history read took every record for the Confluent wire
    format, skipped them all as bad_magic_byte (one WARNING each) and seeded Alertmanager with
    nothing after a restart."""
    from confluent_kafka import Producer

    caplog.set_level(logging.WARNING)
    settings = config.load(overrides={"kafka.bootstrap.servers": broker.bootstrap_servers,
                                      "kafka.encoding": "schemaless", "kafka.topics.alerts": topic_factory(2, "al"),
                                      "kafka.topics.dlq": topic_factory(1, "dlq")})
    now = int(time.time() * 1000)
    sink = KafkaOutputSink(settings)
    sink.write(OutputBatch(0, alerts=[alert("a", "firing", now - 2000), alert("b", "firing", now - 2000),
                                      alert("a", "resolved", now - 1000)]))
    sink.close()
    foreign = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for value in (b"not avro", b"\x00\x00\x00\x00\x63junk"):
        foreign.produce(settings.kafka.alerts_topic, value=value, key=b"x")
    foreign.flush(10)

    latest = read_alert_history(settings)
    assert {fp: r["status"] for fp, r in latest.items()} == {"a": "resolved", "b": "firing"}
    skipped = [r.getMessage() for r in caplog.records if "alert history" in r.getMessage()]
    assert len(skipped) == 1 and "2 record(s)" in skipped[0] and "bad_magic_byte 1" in skipped[0], skipped
