"""The Kafka source's data-loss check when its topic is deleted and created again (a new topic id,
offsets from 0), driven directly on the driver-side reader: no Spark needed, deterministic."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable

from tests.support.kafka import recreate_topic
from udfs.kafka_options import parse_source_options
from udfs.kafka_source import KafkaStreamReader
from udfs.offsets import parse_source_offset
from udfs.partition_reader import DataLossError

pytestmark = [pytest.mark.integration]


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, b"record %d" % i, b"key")
    assert producer.flush(10) == 0


def next_batch(reader: KafkaStreamReader, start: dict) -> dict:
    """What Spark does for one micro-batch on the driver: plan the end offset, then the ranges."""
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.partitions(start, end)
    return end


@pytest.mark.parametrize("records_after", [
    pytest.param(5, id="shorter"),
    # offsets alone would see 10 new records: the topic id (KIP-516) tells
    pytest.param(30, id="longer"),
])
def test_a_recreated_topic_is_data_loss(broker, topic_factory, records_after):
    """20 records read, the topic is deleted and comes back with N records: with
    failOnDataLoss=true the next batch must fail whether N is below or above 20; a reader started
    afresh on the checkpointed position (a restarted job) sees it too, and with
    failOnDataLoss=false reads the new topic from its first record."""
    bootstrap = broker.bootstrap_servers
    topic = topic_factory(partitions=1, prefix="events")
    produce(bootstrap, topic, 20)
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest"}
    reader = KafkaStreamReader(parse_source_options(options))
    position = next_batch(reader, reader.initialOffset())
    assert parse_source_offset(position)[0] == {(topic, 0): 20}
    assert parse_source_offset(position)[1].keys() == {topic}, "the topic id is recorded with the offsets"

    recreate_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, records_after)

    restarted = KafkaStreamReader(parse_source_options(options))
    for planner in (reader, restarted):
        try:
            end = next_batch(planner, position)
        except DataLossError as exc:
            assert "failOnDataLoss=false" in str(exc) and f"{topic}-0" in str(exc)
            if records_after > 20:
                assert "re-created (topic id" in str(exc), str(exc)
            continue
        finally:
            planner.stop()
        raise AssertionError(f"no data loss reported: the next batch reads {position} -> {end} of the new topic, "
                             f"skipping its first {min(20, records_after)} records")

    lenient = KafkaStreamReader(parse_source_options({**options, "failOnDataLoss": "false"}))
    end = lenient.latestOffset(position, ReadAllAvailable())
    [[span]] = [p.spans for p in lenient.partitions(position, end)]
    lenient.stop()
    assert (span.start, span.end) == (0, records_after), "every record of the new topic is read"
