"""The Kafka source's data-loss check across a broker restart that loses the topic (tansu with
memory storage), driven directly on the driver-side reader: no Spark needed, deterministic."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable

from streaming.embedded import create_topics
from udfs.kafka_options import parse_source_options
from udfs.kafka_source import KafkaStreamReader
from udfs.offsets import parse_source_offset
from udfs.partition_reader import DataLossError

pytestmark = [pytest.mark.integration]


def produce_one_by_one(bootstrap: str, topic: str, count: int) -> None:
    """Each record flushed alone, so that tansu's end offsets are exact (shared/notes/tansu.md)."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, b"record %d" % i, b"key")
        assert producer.flush(10) == 0


def next_batch(reader: KafkaStreamReader, start: dict) -> dict:
    """What Spark does for one micro-batch on the driver: plan the end offset, then the ranges."""
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.partitions(start, end)
    return end


@pytest.mark.parametrize("records_after_restart", [
    pytest.param(5, id="shorter"),
    # offsets alone would see 10 new records: the topic id (KIP-516; tansu gives a new one too) tells
    pytest.param(30, id="longer"),
])
def test_topic_lost_in_a_broker_restart_is_data_loss(own_broker, records_after_restart):
    """20 records read, the broker restarts empty, the topic comes back with N records: with
    failOnDataLoss=true the next batch must fail whether N is below or above 20; a reader started
    afresh on the checkpointed position (a restarted job) sees it too, and with
    failOnDataLoss=false reads the new topic from its first record."""
    bootstrap = own_broker.bootstrap_servers
    create_topics(bootstrap, {"events": 1})
    produce_one_by_one(bootstrap, "events", 20)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": "events", "startingOffsets": "earliest"}
    reader = KafkaStreamReader(parse_source_options(options))
    position = next_batch(reader, reader.initialOffset())
    assert parse_source_offset(position)[0] == {("events", 0): 20}
    assert parse_source_offset(position)[1].keys() == {"events"}, "the topic id is recorded with the offsets"

    own_broker.stop()
    own_broker.start()
    create_topics(bootstrap, {"events": 1})
    produce_one_by_one(bootstrap, "events", records_after_restart)

    restarted = KafkaStreamReader(parse_source_options(options))
    for planner in (reader, restarted):
        try:
            end = next_batch(planner, position)
        except DataLossError as exc:
            assert "failOnDataLoss=false" in str(exc) and "events-0" in str(exc)
            if records_after_restart > 20:
                assert "re-created (topic id" in str(exc), str(exc)
            continue
        finally:
            planner.stop()
        raise AssertionError(f"no data loss reported: the next batch reads {position} -> {end} of the new topic, "
                             f"skipping its first {min(20, records_after_restart)} records")

    lenient = KafkaStreamReader(parse_source_options({**options, "failOnDataLoss": "false"}))
    end = lenient.latestOffset(position, ReadAllAvailable())
    [[span]] = [p.spans for p in lenient.partitions(position, end)]
    lenient.stop()
    assert (span.start, span.end) == (0, records_after_restart), "every record of the new topic is read"
