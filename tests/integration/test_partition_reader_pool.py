"""fetch_range with the consumer pool, against the real broker: a read gives its consumer back for
the next range of the same settings, the next read still returns exactly its own range, and a read
that fails or is abandoned closes its consumer instead of pooling it."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from udfs.consumer_pool import POOL
from udfs.offsets import OffsetRange
from udfs.kafka_retry import RetryPolicy
from udfs.partition_reader import FetchTimeoutError, fetch_range

pytestmark = pytest.mark.integration


@pytest.fixture
def loaded_topic(broker, topic_factory):
    topic = topic_factory(partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for p in range(2):
        for i in range(300):
            producer.produce(topic, value=f"p{p}-{i}".encode(), partition=p)
    producer.flush(30)
    return topic


def _read(client, span) -> list[str]:
    return [m.value().decode() for chunk in fetch_range(client, span, chunk_size=100, poll_timeout_ms=5000,
                                                        fail_on_data_loss=True) for m in chunk]


def test_consecutive_reads_share_one_consumer_and_each_gets_its_own_range(broker, loaded_topic):
    POOL.close_all()
    client = {"bootstrap.servers": broker.bootstrap_servers}
    key = tuple(sorted(client.items()))
    assert _read(client, OffsetRange(loaded_topic, 0, 10, 120)) == [f"p0-{i}" for i in range(10, 120)]
    assert len(POOL) == 1
    consumer, errors = POOL.take(key)
    POOL.give_back(key, consumer, errors)
    # another partition and offsets, read by the same consumer: exactly that range, nothing left
    # over from the first read
    assert _read(client, OffsetRange(loaded_topic, 1, 250, 300)) == [f"p1-{i}" for i in range(250, 300)]
    assert _read(client, OffsetRange(loaded_topic, 0, 0, 5)) == [f"p0-{i}" for i in range(5)]
    assert POOL.take(key)[0] is consumer
    consumer.close()


def test_a_failed_read_closes_its_consumer_instead_of_pooling_it(broker, loaded_topic):
    POOL.close_all()
    client = {"bootstrap.servers": broker.bootstrap_servers}
    # records past the partition's end never come (tansu answers no error): the read gives up
    # after brokerUnavailable.maxWaitMs
    with pytest.raises(FetchTimeoutError):
        list(fetch_range(client, OffsetRange(loaded_topic, 0, 290, 400), chunk_size=100, poll_timeout_ms=300,
                         fail_on_data_loss=True, retry=RetryPolicy(max_wait_ms=600)))
    assert len(POOL) == 0


def test_an_abandoned_read_closes_its_consumer(broker, loaded_topic):
    POOL.close_all()
    client = {"bootstrap.servers": broker.bootstrap_servers}
    chunks = fetch_range(client, OffsetRange(loaded_topic, 0, 0, 300), chunk_size=50, poll_timeout_ms=5000,
                         fail_on_data_loss=True)
    assert len(next(chunks)) <= 50
    chunks.close()  # the task stopped half-way
    assert len(POOL) == 0
