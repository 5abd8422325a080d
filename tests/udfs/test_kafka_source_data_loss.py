"""failOnDataLoss, and the stream reader's contract with the engine (read limits, availableNow),
driven against the real broker."""

from __future__ import annotations

import json
import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from streaming.tools.embedded import create_topics
from tests.support.kafka import recreate_topic
from tests.support.kafka_io import kafka_stream, produce, run_available_now
from udfs.kafka_options import parse_source_options
from udfs.kafka_source import KafkaStreamReader
from udfs.offsets import parse_source_offset
from udfs.partition_reader import DataLossError

pytestmark = pytest.mark.spark


def records(n: int, prefix: str = "r"):
    return [(f"{prefix}-{i}".encode(), f"{prefix}-value-{i}".encode()) for i in range(n)]


def test_recreated_topic_fails_the_query_or_continues_from_earliest(spark, bootstrap, topic_factory,
                                                                   tmp_checkpoint):
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, records(50, "before"))
    stream = lambda fail: kafka_stream(spark, bootstrap, subscribe=topic, startingOffsets="earliest",  # noqa: E731
                                       failOnDataLoss=fail).select("key")
    collected, _ = run_available_now(stream("true"), tmp_checkpoint)
    assert len(collected.rows) == 50
    recreate_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, records(10, "after"))  # offsets 0..9 < the checkpoint's 50

    with pytest.raises(Exception) as failure:
        run_available_now(stream("true"), tmp_checkpoint)
    assert f"topic {topic} was re-created (topic id" in str(failure.value), "the restarted query compares the ids"
    assert "failOnDataLoss=false" in str(failure.value)

    collected, _ = run_available_now(stream("false"), tmp_checkpoint)
    assert sorted(bytes(r[0]) for r in collected.rows) == sorted(k for k, _ in records(10, "after"))


def offsets(doc: dict) -> dict:
    """The partitions' offsets of a source offset (without the topic ids)."""
    return parse_source_offset(doc)[0]


def reader(bootstrap: str, topic: str, **options) -> KafkaStreamReader:
    return KafkaStreamReader(parse_source_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
                                                   **{k: str(v) for k, v in options.items()}}))


def test_read_all_available_overrides_max_offsets_per_trigger(bootstrap, topic_factory):
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, records(40), partitions=2)
    source = reader(bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=10)
    start = source.initialOffset()
    assert offsets(start) == {(topic, 0): 0, (topic, 1): 0}
    assert source.getDefaultReadLimit() == ReadMaxRows(10)
    limited = source.latestOffset(start, source.getDefaultReadLimit())
    assert sum(offsets(limited).values()) == 10
    assert offsets(source.latestOffset(start, ReadAllAvailable())) == {(topic, 0): 20, (topic, 1): 20}
    assert source.reportLatestOffset() == {topic: {"0": 20, "1": 20}}


def test_a_run_ramps_up_to_max_offsets_per_trigger_over_the_batches_that_read(bootstrap, topic_factory):
    topic = topic_factory(partitions=2)
    produce(bootstrap, topic, records(200), partitions=2)
    source = reader(bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger=40, rampUpBatches=2)
    position, sizes = source.initialOffset(), []
    for _ in range(6):
        end = source.latestOffset(position, source.getDefaultReadLimit())
        sizes.append(sum(offsets(end).values()) - sum(offsets(position).values()))
        position = end
    assert sizes == [10, 20, 40, 40, 40, 40]
    produce(bootstrap, topic, records(60, "later"), partitions=2)
    end = source.latestOffset(position, source.getDefaultReadLimit())
    assert sum(offsets(end).values()) - sum(offsets(position).values()) == 40, "the ramp is a run's start only"


def test_available_now_stops_at_the_offsets_seen_when_it_started(bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, records(20))
    source = reader(bootstrap, topic, startingOffsets="earliest")
    start = source.initialOffset()
    source.prepareForTriggerAvailableNow()
    produce(bootstrap, topic, records(5, "late"))
    end = source.latestOffset(start, ReadAllAvailable())
    assert offsets(end) == {(topic, 0): 20}
    assert source.latestOffset(end, ReadAllAvailable()) == end, "no more data: the run can finish"


def test_data_loss_is_reported_when_planning(bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, records(5))
    strict = reader(bootstrap, topic)
    with pytest.raises(DataLossError, match="went back from 80 to 5"):
        strict.partitions({topic: {"0": 80}}, {topic: {"0": 5}})
    lenient = reader(bootstrap, topic, failOnDataLoss="false")
    [[span]] = [p.spans for p in lenient.partitions({topic: {"0": 80}}, {topic: {"0": 5}})]
    assert (span.start, span.end) == (0, 5), "continues from the earliest available offset"


def test_read_never_goes_past_the_end_of_its_range(bootstrap, topic_factory):
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, records(100))
    source = reader(bootstrap, topic, startingOffsets="earliest", arrowBatchSize=16)
    [partition] = source.partitions({topic: {"0": 10}}, {topic: {"0": 60}})
    started = time.monotonic()
    batches = list(source.read(partition))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(10, 60))
    assert max(b.num_rows for b in batches) <= 16
    assert time.monotonic() - started < 10


def test_data_loss_the_job_continues_past_is_counted_in_a_metric(spark, bootstrap, tmp_path):
    """Why (issue #22): with failOnDataLoss=false the job skips records it can no longer read (a
    topic re-created, retention); that was only a WARNING in a log, where nothing alerts on it.
    It is counted in epochwatch_source_data_loss_total now, from the job's own progress."""
    import dataclasses

    from streaming import config
    from streaming.sinks.memory import MemorySink
    from streaming.sinks.metrics import Metrics
    from streaming.spark.job import start
    from streaming.spark.pipeline import EVENT_TIME
    from streaming.tools.simulate.writers import event_key
    from tests.support.builders import hb
    from udfs import avro_codec

    suffix = tmp_path.name[-10:]
    settings = config.load(overrides={"kafka.bootstrap.servers": bootstrap, "kafka.startingOffsets": "earliest",
                                      "kafka.failOnDataLoss": "false", "kafka.topics.events": f"loss-ev-{suffix}"})
    settings = dataclasses.replace(settings, checkpoint_location=str(tmp_path / "checkpoint"))
    topic = settings.kafka.events_topic
    beats = [hb(1_767_225_600_000 + i * 500, 1) for i in range(20)]
    create_topics(bootstrap, {topic: 1})
    produce(bootstrap, topic, [(event_key(ev).encode(), avro_codec.encode(ev)) for ev in beats])

    def run_job() -> list[dict]:
        query = start(spark, settings, [MemorySink()], time_mode=EVENT_TIME, available_now=True,
                      query_name=f"loss-{suffix}")
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        return [json.loads(p.json) for p in query.recentProgress]

    metrics = Metrics()
    for progress in run_job():
        metrics.observe_progress(progress)
    assert metrics.data_loss._value.get() == 0
    recreate_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, [(event_key(ev).encode(), avro_codec.encode(ev)) for ev in beats[:5]])
    for progress in run_job():
        metrics.observe_progress(progress)
    assert metrics.data_loss._value.get() == 1, "the re-created topic: one loss, counted once"


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """What retention does to records older than retention.ms: the log start moves to ``offset``."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, partition, offset)]).values()
    assert future.result(30).low_watermark == offset


def test_records_deleted_before_they_were_planned_are_data_loss(bootstrap, topic_factory):
    """The job read 5 of 20 records; retention deletes the first 15 before the next batch is
    planned: records 5..14 are lost. failOnDataLoss=true fails naming the fix; false continues
    from the log start (15), and the planner counts the loss."""
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, records(20))
    delete_records_before(bootstrap, topic, 0, 15)

    strict = reader(bootstrap, topic)
    with pytest.raises(DataLossError, match="failOnDataLoss=false"):
        strict.partitions({topic: {"0": 5}}, {topic: {"0": 20}})
    strict.stop()
    lenient = reader(bootstrap, topic, failOnDataLoss="false", output="packs", decode="avro")
    planned = lenient.partitions({topic: {"0": 5}}, {topic: {"0": 20}})
    lenient.stop()
    assert [(s.start, s.end) for p in planned for s in p.spans] == [(15, 20)]
    assert sum(p.losses for p in planned) == 1, "one loss, carried to the job's metrics"


def test_records_deleted_after_planning_fail_the_read_or_are_skipped(bootstrap, topic_factory):
    """Retention can also run between planning and reading: the range 5..20 was planned, the log
    start is 15 when the executor reads. failOnDataLoss=true fails the task naming the offsets;
    false reads 15..19 and nothing before."""
    topic = topic_factory(partitions=1)
    produce(bootstrap, topic, records(20))
    strict = reader(bootstrap, topic)
    [planned] = strict.partitions({topic: {"0": 5}}, {topic: {"0": 20}})
    lenient = reader(bootstrap, topic, failOnDataLoss="false")
    [planned_lenient] = lenient.partitions({topic: {"0": 5}}, {topic: {"0": 20}})
    delete_records_before(bootstrap, topic, 0, 15)

    with pytest.raises(DataLossError, match=f"{topic}-0 offset 5"):
        list(strict.read(planned))
    offsets = [o for b in lenient.read(planned_lenient) for o in b.column("offset").to_pylist()]
    assert offsets == list(range(15, 20))
