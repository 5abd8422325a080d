"""Alert records through the alerts sink (streaming.sinks.kafka) and back through the alert history
read (streaming.sinks.alert_history) with a Schema Registry: real Apache Kafka, a real registry
with basic auth (tests/support/schema_registry.py), the credentials from the environment as a user
gives them, and the records read as a user would read them, with confluent_kafka's
AvroDeserializer."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from streaming import config
from streaming.sinks.alert_history import read_alert_history
from streaming.sinks.base import OutputBatch
from streaming.sinks.kafka import KafkaOutputSink
from tests.support.polling import wait_until
from tests.support.schema_registry import PASSWORD, USER
from udfs import avro_codec
from udfs.registry_catalog import RegistryRefused

AUTH_VARIABLE = "EPOCHWATCH_TEST_REGISTRY_AUTH"


def settings_for(bootstrap: str, registry_url: str, alerts_topic: str, dlq_topic: str, **overrides):
    return config.load(overrides={
        "kafka.bootstrap.servers": bootstrap, "kafka.topics.alerts": alerts_topic, "kafka.topics.dlq": dlq_topic,
        "kafka.schema.registry.url": registry_url,
        "kafka.schema.registry.basic.auth.user.info": f"${{{AUTH_VARIABLE}}}", **overrides})


def alert(fp: str, status: str = "firing", at: int | None = None) -> dict:
    at = at or int(time.time() * 1000)
    return {"event_type": "alert", "event_id": f"{fp}:{status}", "cluster_id": "c1", "event_time": at,
            "fingerprint": fp, "alertname": "BrokerHeartbeatTimeout", "severity": "critical", "status": status,
            "labels": {"alertname": "BrokerHeartbeatTimeout", "broker_id": fp, "cluster": "c1",
                       "severity": "critical"},
            "annotations": {"summary": f"broker {fp} stopped heartbeating"},
            "starts_at": at - 10_000, "ends_at": at if status == "resolved" else None}


def millis(moment) -> int | None:
    return None if moment is None else round(moment.timestamp() * 1000)


def raw_records(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{time.time_ns()}",
                         "enable.auto.commit": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list = []
        wait_until(lambda: records.extend(m for m in consumer.consume(100, timeout=0.5) if m.error() is None)
                   or len(records) >= count, timeout_s=30, what=f"{count} records in {topic}")
        return records
    finally:
        consumer.close()


@pytest.fixture
def topics(topic_factory):
    return topic_factory(3, "alerts"), topic_factory(1, "dlq")


def test_alert_records_carry_the_registrys_id_and_read_back_with_the_standard_deserializer(
        broker, schema_registry, topics, monkeypatch):
    """Why: with kafka.schema.registry.url a consumer of the alerts topic reads the records with
    its registry as it reads any other topic; the built-in id would name some other schema there."""
    monkeypatch.setenv(AUTH_VARIABLE, f"{USER}:{PASSWORD}")
    alerts_topic, dlq_topic = topics
    settings = settings_for(broker.bootstrap_servers, schema_registry.url, alerts_topic, dlq_topic)
    sink = KafkaOutputSink(settings)
    now = int(time.time() * 1000)
    sent = [alert("b-1", at=now - 3000), alert("b-2", at=now - 2000), alert("b-1", "resolved", at=now - 1000)]
    sink.write(OutputBatch(0, alerts=sent))
    sink.close()

    registry = SchemaRegistryClient({"url": schema_registry.url, "basic.auth.user.info": f"{USER}:{PASSWORD}"})
    schema_id = registry.get_latest_version(f"{alerts_topic}-io.epochwatch.events.v1.Alert").schema_id
    records = raw_records(broker.bootstrap_servers, alerts_topic, len(sent))
    assert {avro_codec.HEADER.unpack_from(m.value()) for m in records} == {(avro_codec.MAGIC_BYTE, schema_id)}

    deserialize = AvroDeserializer(registry)
    read = [deserialize(m.value(), SerializationContext(alerts_topic, MessageField.VALUE)) for m in records]
    # timestamps come back as the Avro logical type timestamp-millis says: datetimes in UTC
    assert sorted((r["event_id"], r["labels"]["broker_id"], millis(r["starts_at"]), millis(r["ends_at"]))
                  for r in read) == sorted((a["event_id"], a["labels"]["broker_id"], a["starts_at"], a["ends_at"])
                                           for a in sent)
    assert {m.key().decode() for m in records} == {"b-1", "b-2"}, "the key is still the fingerprint"

    latest = read_alert_history(settings)
    assert {fp: r["status"] for fp, r in latest.items()} == {"b-1": "resolved", "b-2": "firing"}


def test_refused_credentials_stop_the_start_with_the_key_to_fix_and_lose_nothing(
        broker, schema_registry, topics, monkeypatch):
    """Why: a wrong password must not read as an empty history (Alertmanager would be seeded with
    nothing and stale pages stay open) nor wait for ever; the job must not start at all, saying
    which setting to fix, and the records already in the topic are still there for the next start."""
    alerts_topic, dlq_topic = topics
    monkeypatch.setenv(AUTH_VARIABLE, f"{USER}:{PASSWORD}")
    good = settings_for(broker.bootstrap_servers, schema_registry.url, alerts_topic, dlq_topic,
                        **{"kafka.brokerUnavailable.maxWaitMs": 20_000})
    sink = KafkaOutputSink(good)
    sink.write(OutputBatch(0, alerts=[alert("b-7")]))
    sink.close()

    monkeypatch.setenv(AUTH_VARIABLE, f"{USER}:wrong-pw-0b4e")
    wrong = settings_for(broker.bootstrap_servers, schema_registry.url, alerts_topic, dlq_topic,
                         **{"kafka.brokerUnavailable.maxWaitMs": 20_000})
    for start in (lambda: KafkaOutputSink(wrong), lambda: read_alert_history(wrong)):
        with pytest.raises(RegistryRefused) as err:
            start()
        assert "HTTP 401" in str(err.value) and "kafka.schema.registry.basic.auth.user.info" in str(err.value)
        assert "wrong-pw" not in str(err.value)
    assert {fp: r["status"] for fp, r in read_alert_history(good).items()} == {"b-7": "firing"}


def test_a_registry_that_does_not_answer_at_start_up_holds_the_start_and_nothing_is_lost(
        broker, schema_registry_factory, topics, monkeypatch, caplog):
    """Why: a registry paused or restarting while the job starts is waited for, as a broker is
    (kafka.fetchOffset.timeoutMs per request, kafka.brokerUnavailable.maxWaitMs as the bound), with a
    line that says so; the history and the alerts of the first batch then go through as usual."""
    caplog.set_level(logging.WARNING)
    monkeypatch.setenv(AUTH_VARIABLE, f"{USER}:{PASSWORD}")
    alerts_topic, dlq_topic = topics
    registry = schema_registry_factory()
    settings = settings_for(broker.bootstrap_servers, registry.url, alerts_topic, dlq_topic,
                            **{"kafka.fetchOffset.timeoutMs": 1000})
    first = KafkaOutputSink(settings)
    first.write(OutputBatch(0, alerts=[alert("b-3")]))
    first.close()

    registry.pause()
    started: dict = {}

    def start():
        started["history"] = read_alert_history(settings)
        started["sink"] = KafkaOutputSink(settings)

    starting = threading.Thread(target=start, daemon=True)
    try:
        starting.start()
        wait_until(lambda: f"Schema Registry {registry.url} unreachable" in caplog.text, timeout_s=30,
                   what="the start to say it waits for the registry")
        assert starting.is_alive() and not started
    finally:
        registry.resume()
    starting.join(60)
    assert not starting.is_alive(), "the start did not go on once the registry answered"
    assert {fp: r["status"] for fp, r in started["history"].items()} == {"b-3": "firing"}
    assert f"Schema Registry {registry.url} answering again" in caplog.text and PASSWORD not in caplog.text
    started["sink"].write(OutputBatch(1, alerts=[alert("b-3", "resolved")]))
    started["sink"].close()
    assert {fp: r["status"] for fp, r in read_alert_history(settings).items()} == {"b-3": "resolved"}
