"""Read one offset range [start, end) of one Kafka partition (runs on executors).

The consumer is assigned the partition at ``start`` (no consumer group, no commits) and reads
until ``end`` and never past it: Spark's checkpoint holds the offsets, so a retried task or a
restarted query reads exactly the same records. Gaps (compacted topics, transaction markers) are
fine: the range is done once the consumer's position reaches ``end``.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Iterator, Mapping

from udfs.offsets import OffsetRange

log = logging.getLogger("epochwatch.kafka_source")

# Settings that make a bounded read fast; any kafka.* option overrides them.
_THROUGHPUT_DEFAULTS = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "queued.max.messages.kbytes": 256 * 1024,
    "fetch.wait.max.ms": 100,
}
_FORCED = {"enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "error",
           "enable.partition.eof": False}
_CONSUME_WAIT_S = 0.5


class DataLossError(RuntimeError):
    """Records of the range no longer exist (retention, or the topic was re-created)."""


class FetchTimeoutError(TimeoutError):
    """The broker did not deliver the range in time."""


def consumer_settings(client: Mapping[str, str]) -> dict:
    group = client.get("group.id") or f"epochwatch-kafka-source-{uuid.uuid4().hex[:12]}"
    return {**_THROUGHPUT_DEFAULTS, **dict(client), "group.id": group, **_FORCED}


def fetch_range(client: Mapping[str, str], span: OffsetRange, *, chunk_size: int, poll_timeout_ms: int,
                fail_on_data_loss: bool) -> Iterator[list]:
    """Yield lists of at most ``chunk_size`` messages covering [span.start, span.end) in order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(consumer_settings(client))
    partition = TopicPartition(span.topic, span.partition)
    next_offset = span.start
    try:
        consumer.assign([TopicPartition(span.topic, span.partition, next_offset)])
        deadline = time.monotonic() + poll_timeout_ms / 1000
        while next_offset < span.end:
            messages = consumer.consume(min(chunk_size, span.end - next_offset), _CONSUME_WAIT_S)
            failed = [m for m in messages if m.error() is not None]
            if failed:
                resume, reassign = _on_errors(consumer, span, next_offset, failed, fail_on_data_loss)
                if resume is None:
                    return
                if reassign:
                    next_offset = resume
                    consumer.assign([TopicPartition(span.topic, span.partition, next_offset)])
                    deadline = time.monotonic() + poll_timeout_ms / 1000
                    continue
                messages = [m for m in messages if m.error() is None]
            if messages and messages[-1].offset() >= span.end:
                messages = [m for m in messages if m.offset() < span.end]
            if messages:
                next_offset = messages[-1].offset() + 1
                deadline = time.monotonic() + poll_timeout_ms / 1000
                yield messages
                continue
            position = consumer.position([partition])[0].offset
            if position >= span.end:
                return  # the rest of the range holds no records (compaction, transaction markers)
            if time.monotonic() > deadline:
                raise FetchTimeoutError(
                    f"{span.topic}-{span.partition}: no record at offset {next_offset} (range ends at {span.end}) "
                    f"within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}. Fix: check that the broker is "
                    "reachable from the executors, or raise kafkaConsumer.pollTimeoutMs")
    finally:
        consumer.close()


def _on_errors(consumer, span: OffsetRange, next_offset: int, failed: list,
               fail_on_data_loss: bool) -> tuple[int | None, bool]:
    """Where to continue after consumer errors (None: the range is finished) and whether the
    consumer must be re-assigned there."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    for message in failed:
        error = message.error()
        code = error.code()
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE,
                    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
            where = f"{span.topic}-{span.partition} offset {next_offset}"
            if fail_on_data_loss:
                raise DataLossError(f"{where}: {error.str()}; records {next_offset}..{span.end - 1} may be lost "
                                    "(deleted by retention, or the topic was re-created). Fix: set "
                                    "failOnDataLoss=false to skip lost records, or restart from a new checkpoint")
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                log.warning("%s: partition is gone, skipping records up to %d (failOnDataLoss=false)", where, span.end)
                return None, False
            low, high = consumer.get_watermark_offsets(TopicPartition(span.topic, span.partition), cached=False)
            resume = low if next_offset < low or next_offset > high else next_offset
            log.warning("%s is out of range [%d, %d): continuing from %d (failOnDataLoss=false)",
                        where, low, high, resume)
            return (resume if resume < span.end else None), True
        if error.fatal() or code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
                                     KafkaError._AUTHENTICATION, KafkaError._SSL):
            raise KafkaException(error)
        log.info("%s-%d: transient consumer error %s", span.topic, span.partition, error.str())
    return next_offset, False
