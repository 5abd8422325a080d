"""The planner's peek at the first unread record of lagging partitions (udfs.read_progress), on
the real broker: partitions written in large producer batches, as a backlog is, so that one fetch
can hand over far more than the one record wanted per partition."""

from __future__ import annotations

import itertools

import pytest
from confluent_kafka import Producer

from streaming.events import normalize
from streaming.tools.simulate import ClusterShape, steady_state
from udfs import avro_codec, record_batches
from udfs.read_progress import NextEventTimes

pytestmark = pytest.mark.integration

PARTITIONS, PER_PARTITION = 4, 4000
T0 = 1_767_225_600_000


def event_time(partition: int, index: int) -> int:
    return T0 + partition * 100_000 + index * 10


@pytest.fixture
def backlog(broker, topic_factory):
    """A topic whose record at (partition, index) has event time ``event_time(partition, index)``."""
    topic = topic_factory(partitions=PARTITIONS, prefix="peek")
    template = list(itertools.islice(steady_state(shape=ClusterShape(brokers=3, clients=10), duration_ms=60_000), 50))
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 200,
                         "batch.size": 1_000_000, "compression.type": "lz4"})
    for partition in range(PARTITIONS):
        for index in range(PER_PARTITION):
            event = normalize({**template[index % len(template)], "event_time": event_time(partition, index)})
            producer.produce(topic, avro_codec.encode(event), partition=partition)
    assert producer.flush(30) == 0
    return broker.bootstrap_servers, topic


def test_each_lagging_partition_answers_with_the_event_time_at_its_offset_peek_after_peek(backlog):
    bootstrap, topic = backlog
    peek = NextEventTimes({"bootstrap.servers": bootstrap}, lambda _: record_batches.confluent_decoder(), 10_000)
    try:
        for step, at in enumerate((10, 1500, 2900, 3999)):
            offsets = {(topic, p): at - 7 * p * step for p in range(PARTITIONS)}
            # _peek's answer is per partition; clock_cap keeps only the earliest of them
            assert peek._peek(offsets) == {tp: event_time(tp[1], offset) for tp, offset in offsets.items()}
        assert peek.clock_cap({(topic, 2): 100, (topic, 3): 50}) == event_time(2, 100)
    finally:
        peek.close()
