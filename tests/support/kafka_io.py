"""Helpers for the Kafka source / sink tests: produce real records, run queries with deadlines.
(Imported by the test modules of this folder; the fixtures are in conftest.py.)

Expectations come from what was produced (delivery reports give each record's partition and
offset), never from the broker's watermarks.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition

from streaming import events
from tests.support.polling import wait_until

QUERY_TIMEOUT_S = 90


@dataclass(frozen=True)
class Produced:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def produce(bootstrap: str, topic: str, records, partitions: int = 1) -> list[Produced]:
    """Produce (key, value[, headers]) tuples round-robin over partitions; returns their coordinates."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "enable.idempotence": True})
    delivered: list[Produced] = []

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append(Produced(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))

    records = list(records)
    by_partition = {p: records[p::partitions] for p in range(partitions)}
    for partition, items in by_partition.items():
        for key, value, *headers in items:
            producer.produce(topic, key=key, value=value, partition=partition, headers=headers[0] if headers else None,
                             on_delivery=on_delivery)
            producer.poll(0)
    producer.flush(30)
    assert len(delivered) == len(records)
    return delivered


def consume_all(bootstrap: str, topic: str, expected: int, partitions: int = 1, timeout_s: float = 60):
    """Every record of a topic (assign from the beginning, no group), until ``expected`` are read."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "epochwatch-test-reader",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = []
    try:
        def enough():
            seen.extend(m for m in consumer.consume(1000, 0.2) if m.error() is None)
            return len(seen) >= expected
        wait_until(enough, timeout_s=timeout_s, interval_s=0, what=f"{expected} records in {topic} (got {len(seen)})")
        seen.extend(m for m in consumer.consume(1000, 0.5) if m.error() is None)  # nothing extra may follow
    finally:
        consumer.close()
    return seen


_ids = itertools.count()


def sample_events(per_type: int = 3) -> list[dict]:
    """Valid events of every input type with distinct values (optional fields set on some)."""
    out = []
    for i in range(per_type):
        base = lambda: {"event_id": f"ev-{next(_ids)}", "cluster_id": f"cluster-{i}",  # noqa: E731
                        "event_time": 1_790_000_000_000 + i * 1013}
        out += [
            {**base(), "event_type": "broker_heartbeat", "controller_id": 1, "controller_epoch": 5 + i,
             "broker_id": i, "incarnation_id": 10_000_000_000 + i, "target_state": "ACTIVE",
             "incarnation_uuid": f"uuid-{i}" if i % 2 else None, "want_fence": bool(i % 2), "want_shutdown": False,
             "current_metadata_offset": 77 + i, "error_code": 77 if i == 2 else 0,
             "current_state": ["INITIAL", "INACTIVE", "STOPPING"][i % 3]},
            {**base(), "event_type": "metadata_update", "controller_id": 2, "controller_epoch": 6,
             "metadata_epoch": 1000 + i, "broker_id": 3},
            {**base(), "event_type": "metadata_response", "client_id": f"c-{i}", "broker_id": 1,
             "metadata_epoch": -1 if i == 0 else 900 + i, "error_code": 129 if i == 1 else 0, "broker_count": 3,
             "response_cluster_id": "cluster-x" if i else None},
            {**base(), "event_type": "metadata_request_failed", "client_id": f"c-{i}", "node_id": None if i == 0 else i,
             "reason": ["CONNECTION_SETUP_TIMEOUT", "DISCONNECTED", "NO_NODE_AVAILABLE", "REQUEST_TIMEOUT"][i % 4]},
            {**base(), "event_type": "client_rebootstrap", "client_id": f"c-{i}", "reason": "REBOOTSTRAP_REQUIRED",
             "cluster_id_before": "old" if i else None, "cluster_id_after": "new"},
            {**base(), "event_type": "connection_attempt", "client_id": f"c-{i}", "node_id": -1 - i,
             "outcome": ["CONNECTED", "SETUP_TIMEOUT", "FAILED"][i % 3], "setup_timeout_ms": 10_000 * (i + 1),
             "consecutive_failures": i},
            {**base(), "event_type": "offset_commit", "group_id": f"g-{i}", "topic": "orders", "partition": i,
             "offset": 123_456 + i, "metadata_epoch": 42},
            {**base(), "event_type": "cluster_reset"},
        ]
    return [events.normalize(e) for e in out]


def kafka_stream(spark, bootstrap: str, **options):
    reader = spark.readStream.format("epochwatch-kafka").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name.replace("__", "."), str(value))
    return reader.load()


class BatchCollector:
    """foreachBatch target that keeps rows per batch id: a replayed batch replaces itself (the
    idempotent-sink pattern), so duplicates across batches are real duplicates."""

    def __init__(self, columns: tuple[str, ...] = ("topic", "partition", "offset"), also=None):
        self.columns = columns
        self.also = also  # called with (df, batch_id) after collecting, like a job's foreachBatch
        self.batches: dict[int, list[tuple]] = {}
        self.replayed: list[int] = []

    def __call__(self, df, batch_id: int) -> None:
        rows = [tuple(r) for r in df.select(*self.columns).collect()]
        if batch_id in self.batches:
            self.replayed.append(batch_id)
            assert sorted(self.batches[batch_id]) == sorted(rows), "a replayed batch must read the same records"
        self.batches[batch_id] = rows
        if self.also is not None:
            self.also(df, batch_id)

    @property
    def rows(self) -> list[tuple]:
        return [row for batch_id in sorted(self.batches) for row in self.batches[batch_id]]


def run_available_now(df, checkpoint: str | None = None, collector: BatchCollector | None = None):
    """Run a query with trigger(availableNow=True) to the end; returns (collector, query)."""
    collector = collector or BatchCollector(tuple(df.columns))
    writer = df.writeStream.foreachBatch(collector).trigger(availableNow=True)
    if checkpoint:
        writer = writer.option("checkpointLocation", checkpoint)
    query = writer.start()
    finished = query.awaitTermination(QUERY_TIMEOUT_S)
    if not finished:
        query.stop()
        raise AssertionError(f"query did not finish within {QUERY_TIMEOUT_S}s")
    if query.exception() is not None:
        raise query.exception()
    return collector, query


def input_rows_per_batch(query) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def deadline_loop(what: str, timeout_s: float = QUERY_TIMEOUT_S):
    """Iterate until the caller breaks, failing the test at the deadline."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        yield
    raise AssertionError(f"timed out after {timeout_s}s: {what}")
