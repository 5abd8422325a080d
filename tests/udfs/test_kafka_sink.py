"""The epochwatch-kafka-sink data source and EventProducer: write, read back with a plain consumer,
decode, compare."""

from __future__ import annotations

import pytest

from streaming import events
from streaming.tools.embedded import free_port
from tests.support.kafka_io import QUERY_TIMEOUT_S, consume_all, kafka_stream, produce, sample_events
from udfs import avro_codec
from udfs.dead_letters import headers_to_dict
from udfs.kafka_sink import DeliveryError, EventProducer, event_key

pytestmark = pytest.mark.spark

ALERT_STRUCT = """named_struct(
    'event_id', concat('fp-', k, ':firing'), 'cluster_id', 'c1', 'event_time', ts,
    'alertname', 'BrokerHeartbeatTimeout', 'severity', 'critical', 'status', 'firing',
    'labels', map('alertname', 'BrokerHeartbeatTimeout', 'cluster', 'c1', 'severity', 'critical', 'broker_id', k),
    'annotations', map('summary', concat('broker ', k, ' sent no heartbeat')),
    'starts_at', ts, 'ends_at', cast(null as timestamp), 'fingerprint', concat('fp-', k)) AS alert"""


def run_sink(df, checkpoint: str, **options) -> None:
    writer = df.writeStream.format("epochwatch-kafka-sink").option("checkpointLocation", checkpoint)
    for name, value in options.items():
        writer = writer.option(name.replace("__", "."), value)
    query = writer.trigger(availableNow=True).start()
    assert query.awaitTermination(QUERY_TIMEOUT_S), "sink query did not finish"
    assert query.exception() is None, query.exception()


def test_streaming_alerts_round_trip_keyed_by_fingerprint(spark, bootstrap, topic_factory, tmp_checkpoint):
    seed, out = topic_factory(partitions=2), topic_factory(partitions=2, prefix="alerts")
    produce(bootstrap, seed, [(str(i).encode(), b"x") for i in range(40)], partitions=2)
    alerts = (kafka_stream(spark, bootstrap, subscribe=seed, startingOffsets="earliest")
              .selectExpr("cast(key AS string) AS k", "timestamp AS ts").selectExpr(ALERT_STRUCT))
    run_sink(alerts, tmp_checkpoint, kafka__bootstrap__servers=bootstrap, topic=out)

    records = consume_all(bootstrap, out, expected=40, partitions=2)
    decoded = {r.key().decode(): avro_codec.decode(r.value()) for r in records}
    assert len(records) == 40 and sorted(decoded) == sorted(f"fp-{i}" for i in range(40))
    for fingerprint, alert in decoded.items():
        assert alert["event_type"] == "alert" and alert["fingerprint"] == fingerprint
        assert alert["event_id"] == f"{fingerprint}:firing" and alert["ends_at"] is None
        assert alert["labels"]["broker_id"] == fingerprint[3:] and alert["severity"] == "critical"
        assert alert["event_time"] == alert["starts_at"] > 1_700_000_000_000
        assert events.normalize(alert) == alert, "a valid alert event"


def test_streaming_key_value_rows_like_sparks_kafka_sink(spark, bootstrap, topic_factory, tmp_checkpoint):
    seed, out = topic_factory(partitions=1), topic_factory(partitions=1, prefix="copy")
    sent = [(f"k{i}".encode(), f"v{i}".encode(), [("trace", f"t{i}".encode())]) for i in range(25)]
    produce(bootstrap, seed, sent)
    copy = (kafka_stream(spark, bootstrap, subscribe=seed, startingOffsets="earliest")
            .selectExpr("key", "value", "headers", f"'{out}' AS topic"))
    run_sink(copy, tmp_checkpoint, kafka__bootstrap__servers=bootstrap)
    records = consume_all(bootstrap, out, expected=25)
    assert sorted((r.key(), r.value(), r.headers()[0]) for r in records) == sorted(
        (k, v, h[0]) for k, v, h in sent)


def test_batch_write_and_missing_columns_error(spark, bootstrap, topic_factory):
    out = topic_factory(partitions=1, prefix="batch")
    df = spark.createDataFrame([("a", "1"), ("b", "2")], "key string, value string")
    df.write.format("epochwatch-kafka-sink").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", out).mode("append").save()
    assert sorted((r.key(), r.value()) for r in consume_all(bootstrap, out, expected=2)) == [
        (b"a", b"1"), (b"b", b"2")]
    with pytest.raises(Exception, match="select a 'value' column"):
        spark.createDataFrame([(1,)], "x int").write.format("epochwatch-kafka-sink") \
            .option("kafka.bootstrap.servers", bootstrap).option("topic", out).mode("append").save()


@pytest.mark.parametrize("encoding", ["avro", "avro-schemaless"])
def test_event_producer_keys_and_encodes(bootstrap, topic_factory, encoding):
    out = topic_factory(partitions=1, prefix="events")
    sent = sample_events(per_type=1) + [events.normalize({
        "event_type": "alert", "event_id": "fp9:resolved", "cluster_id": "c1", "event_time": 5, "alertname": "X",
        "severity": "warning", "status": "resolved", "labels": {"alertname": "X"}, "annotations": {},
        "starts_at": 1, "ends_at": 5, "fingerprint": "fp9"})]
    producer = EventProducer(bootstrap, {"client.id": "epochwatch-test"}, encoding=encoding)
    assert producer.send(sent, out) == len(sent)
    assert producer.flush() == len(sent)
    records = consume_all(bootstrap, out, expected=len(sent))
    for record, event in zip(records, sent):
        assert record.key().decode() == event_key(event)
        if encoding == "avro":
            assert avro_codec.decode(record.value()) == event
        else:
            event_type = headers_to_dict(record.headers())[avro_codec.EVENT_TYPE_HEADER]
            assert avro_codec.decode_schemaless(record.value(), event_type) == event
    assert records[-1].key() == b"fp9", "an alert is keyed by its fingerprint"


def test_event_producer_raises_when_the_broker_never_acknowledges():
    producer = EventProducer(f"127.0.0.1:{free_port()}", {"message.timeout.ms": "1500"})
    producer.send(sample_events(per_type=1)[:2], "nowhere")
    with pytest.raises(DeliveryError, match="2 record"):
        producer.flush()
