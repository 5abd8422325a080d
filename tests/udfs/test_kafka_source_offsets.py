"""The epochwatch-kafka source against the real broker: where it starts, where it resumes, how much
it admits per batch, and which topics it finds."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pytest

from tests.support.kafka_io import (
    QUERY_TIMEOUT_S,
    BatchCollector,
    deadline_loop,
    input_rows_per_batch,
    kafka_stream,
    produce,
    run_available_now,
)
from tests.support.polling import wait_until

pytestmark = pytest.mark.spark


def coordinates(produced) -> list[tuple]:
    return sorted((p.topic, p.partition, p.offset) for p in produced)


def records(n: int, prefix: str = "r"):
    return [(f"{prefix}-{i}".encode(), f"value-{i}".encode()) for i in range(n)]


def test_earliest_reads_everything_once(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=3)
    produced = produce(bootstrap, topic, records(300), partitions=3)
    collected, _ = run_available_now(kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
                                     .select("topic", "partition", "offset", "key", "value"))
    assert sorted(r[:3] for r in collected.rows) == coordinates(produced)
    by_offset = {(p.partition, p.offset): (p.key, p.value) for p in produced}
    assert all(by_offset[(r[1], r[2])] == (bytes(r[3]), bytes(r[4])) for r in collected.rows)


def test_json_starting_offsets_with_earliest_and_explicit_offsets(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=2)
    produced = produce(bootstrap, topic, records(40), partitions=2)
    start = json.dumps({topic: {"0": 5, "1": -2}})
    collected, _ = run_available_now(kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets=start)
                                     .select("topic", "partition", "offset"))
    expected = [c for c in coordinates(produced) if c[1] == 1 or c[2] >= 5]
    assert sorted(collected.rows) == expected


def test_latest_skips_what_was_there_and_reads_what_comes(spark, bootstrap, topic_factory, tmp_checkpoint):
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, records(50, "old"), partitions=2)
    collector = BatchCollector(("topic", "partition", "offset", "key"))
    query = (kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="latest")
             .select("topic", "partition", "offset", "key").writeStream.foreachBatch(collector)
             .option("checkpointLocation", tmp_checkpoint).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: query.lastProgress is not None, QUERY_TIMEOUT_S, what="first trigger (latest resolved)")
        new = produce(bootstrap, topic, records(30, "new"), partitions=2)
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(r[:3] for r in collector.rows) == coordinates(new)
    assert all(bytes(r[3]).startswith(b"new-") for r in collector.rows)


def test_restart_from_checkpoint_loses_nothing_and_duplicates_nothing(spark, bootstrap, topic_factory,
                                                                        tmp_checkpoint):
    topic = topic_factory(partitions=2)
    produced = produce(bootstrap, topic, records(600), partitions=2)
    collector = BatchCollector()
    stream = kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=100)
    first = (stream.select("topic", "partition", "offset").writeStream.foreachBatch(collector)
             .option("checkpointLocation", tmp_checkpoint).trigger(processingTime="0 seconds").start())
    try:
        wait_until(lambda: len(collector.batches) >= 2, QUERY_TIMEOUT_S, what="two batches before the stop")
    finally:
        first.stop()  # may interrupt a batch: the restarted query must replay it with the same offsets
    assert 0 < len(collector.rows) < len(produced), "stopped mid-stream"
    _, second = run_available_now(stream.select("topic", "partition", "offset"), tmp_checkpoint, collector)
    counts = Counter(collector.rows)
    assert [row for row, n in counts.items() if n > 1] == [], "duplicates across the two runs"
    assert sorted(counts) == coordinates(produced), "records lost across the restart"
    assert max(input_rows_per_batch(second)) <= 100


def test_max_offsets_per_trigger_limits_every_batch(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=3)
    produced = produce(bootstrap, topic, records(900), partitions=3)
    collected, query = run_available_now(
        kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=250)
        .select("topic", "partition", "offset"))
    per_batch = input_rows_per_batch(query)
    assert sum(per_batch) == len(produced) and max(per_batch) <= 250 and len(per_batch) >= 4, per_batch
    assert sorted(collected.rows) == coordinates(produced)


def test_min_partitions_splits_ranges_without_changing_the_records(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    produced = produce(bootstrap, topic, records(400), partitions=1)
    rows, spark_partitions = _read_once(kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                                                     minPartitions=4))
    assert sorted(rows) == coordinates(produced)
    assert spark_partitions and spark_partitions[0] == 4


def test_records_per_task_reads_small_ranges_together_without_changing_the_records(spark, bootstrap, topic_factory):
    topic = topic_factory(partitions=4)
    produced = produce(bootstrap, topic, records(400), partitions=4)
    rows, spark_partitions = _read_once(kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",
                                                     recordsPerTask=1000, minPartitions=2))
    assert sorted(rows) == coordinates(produced)
    assert spark_partitions and spark_partitions[0] == 2, "4 Kafka partitions of ~100 records: 2 tasks (minPartitions)"


def _read_once(stream) -> tuple[list, list[int]]:
    """The stream's records (available-now) and each micro-batch's number of Spark partitions."""
    spark_partitions = []
    collector = BatchCollector()

    def collect(df, batch_id):
        spark_partitions.append(df.rdd.getNumPartitions())
        collector(df, batch_id)

    query = stream.select("topic", "partition", "offset").writeStream.foreachBatch(collect) \
        .trigger(availableNow=True).start()
    assert query.awaitTermination(QUERY_TIMEOUT_S) and query.exception() is None
    return collector.rows, spark_partitions


def test_subscribe_pattern_picks_up_a_new_topic_from_its_earliest_offset(spark, bootstrap, topic_factory,
                                                                          tmp_checkpoint):
    prefix = f"pat{uuid.uuid4().hex[:8]}"
    first_topic = topic_factory(prefix=prefix)
    before = produce(bootstrap, first_topic, records(20))
    collector = BatchCollector()
    query = (kafka_stream(spark, bootstrap, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
             .select("topic", "partition", "offset").writeStream.foreachBatch(collector)
             .option("checkpointLocation", tmp_checkpoint).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(collector.rows) == 20, QUERY_TIMEOUT_S, what="records of the first topic")
        second_topic = topic_factory(prefix=prefix)
        after = produce(bootstrap, second_topic, records(15))  # produced before the source has seen the topic
        for _ in deadline_loop("records of the new topic"):
            query.processAllAvailable()
            if len(collector.rows) >= 35:
                break
    finally:
        query.stop()
    assert sorted(collector.rows) == coordinates(before + after)


def test_partitions_added_to_a_topic_are_read_from_their_earliest_offset(spark, bootstrap, topic_factory,
                                                                         tmp_checkpoint):
    """A topic grown from 1 to 3 partitions while the query runs (kafka-topics --alter): the new
    partitions are read from offset 0, so records produced to them before the source looked are
    not skipped, and nothing is read twice."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = topic_factory(partitions=1)
    before = produce(bootstrap, topic, records(20))
    collector = BatchCollector()
    query = (kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest")
             .select("topic", "partition", "offset").writeStream.foreachBatch(collector)
             .option("checkpointLocation", tmp_checkpoint).trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(collector.rows) == 20, QUERY_TIMEOUT_S, what="records of the first partition")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
        wait_until(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3, 30,
                   what="the new partitions in the metadata")
        after = produce(bootstrap, topic, records(30, "late"), partitions=3)
        for _ in deadline_loop("records of the new partitions"):
            query.processAllAvailable()
            if len(collector.rows) >= 50:
                break
    finally:
        query.stop()
    assert {p.partition for p in after} == {0, 1, 2}
    assert sorted(collector.rows) == coordinates(before + after)
