"""Read one offset range [start, end) of one Kafka partition (runs on executors).

The consumer is assigned the partition at ``start`` (no consumer group, no commits) and reads
until ``end`` and never past it: Spark's checkpoint holds the offsets, so a retried task or a
restarted query reads exactly the same records. Gaps (compacted topics, transaction markers) are
fine: the range is done once the consumer's position reaches ``end``.

A broker that is slow or unreachable is waited for: every ``kafkaConsumer.pollTimeoutMs``
without a record the wait is checked against ``brokerUnavailable.maxWaitMs`` (default: forever)
and a WARNING says for how long (at most every 30 s). Authentication, TLS and ACL errors, which
librdkafka reports through ``error_cb``, fail the read at once.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Iterator, Mapping

from udfs.kafka_retry import (BrokerUnavailableError, Outage, RetryPolicy, describe, is_permanent, is_transient,
                              permanent_error)
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
# A chunk is decoded and converted in one piece, so it is bounded in bytes as well as in records:
# a record may be as large as its producer allowed, and thousands of 300 KB records asked for at
# once would be gigabytes in one task. Reads ask for one record first, then twice as many each time,
# up to READ_RECORDS and to as many as fit CHUNK_BYTES at the largest record's size seen so far;
# they are gathered into chunks. A chunk holds at most CHUNK_BYTES plus one read: READ_RECORDS
# records when large ones follow small ones (at most 256 MB with Kafka's 1 MB record limit).
CHUNK_BYTES = 64 * 1024 * 1024
READ_RECORDS = 256


class DataLossError(RuntimeError):
    """Records of the range no longer exist (retention, or the topic was re-created)."""


class FetchTimeoutError(BrokerUnavailableError):
    """The broker did not deliver the range within brokerUnavailable.maxWaitMs."""


class ClientErrors:
    """What librdkafka reported through ``error_cb`` (not tied to a message): the last transient
    error, to say why a read waits, and the first permanent one, to stop waiting."""

    def __init__(self):
        self.last_transient: str | None = None
        self.permanent = None

    def record(self, error) -> None:
        if is_permanent(error):
            self.permanent = self.permanent or error
        elif is_transient(error):
            self.last_transient = describe(error)


def consumer_settings(client: Mapping[str, str]) -> dict:
    group = client.get("group.id") or f"epochwatch-kafka-source-{uuid.uuid4().hex[:12]}"
    return {**_THROUGHPUT_DEFAULTS, **dict(client), "group.id": group, **_FORCED}


def fetch_range(client: Mapping[str, str], span: OffsetRange, *, chunk_size: int, poll_timeout_ms: int,
                fail_on_data_loss: bool, retry: RetryPolicy = RetryPolicy(),
                chunk_bytes: int = CHUNK_BYTES, on_loss=None) -> Iterator[list]:
    """Yield lists of at most ``chunk_size`` messages covering [span.start, span.end) in order, of
    about ``chunk_bytes`` at most (a chunk ends at the read that reaches it). ``on_loss()`` is
    called each time records are skipped as lost (failOnDataLoss=false), to be counted."""
    reads = _Reads(chunk_size, chunk_bytes)
    chunk: list = []
    size = 0
    for messages, asked in _read_range(client, span, reads, poll_timeout_ms, fail_on_data_loss, retry, on_loss):
        chunk += messages
        size += reads.saw(messages)
        # a read that got fewer records than it asked for found no more waiting: pass them on
        if len(chunk) >= chunk_size or size >= chunk_bytes or len(messages) < asked:
            yield chunk
            chunk, size = [], 0
        reads.room = chunk_size - len(chunk)
    if chunk:
        yield chunk


class _Reads:
    """How many records the next read asks for (see CHUNK_BYTES)."""

    def __init__(self, chunk_size: int, chunk_bytes: int):
        self.chunk_bytes = chunk_bytes
        self.room = chunk_size  # records the chunk being gathered still takes
        self.largest = 0
        self.asked = 0

    def saw(self, messages: list) -> int:
        """The bytes of a read's records."""
        sizes = [len(m.value() or b"") + len(m.key() or b"") for m in messages]
        self.largest = max(self.largest, max(sizes, default=0))
        return sum(sizes)

    def count(self) -> int:
        fit = self.chunk_bytes // self.largest if self.largest else READ_RECORDS
        self.asked = max(1, min(2 * self.asked, READ_RECORDS, fit))
        return min(self.asked, self.room)


def _read_range(client: Mapping[str, str], span: OffsetRange, reads: _Reads, poll_timeout_ms: int,
                fail_on_data_loss: bool, retry: RetryPolicy, on_loss=None) -> Iterator[tuple[list, int]]:
    """(messages, how many were asked for) of each read that got some, covering the range."""
    from confluent_kafka import Consumer, TopicPartition

    errors = ClientErrors()
    consumer = Consumer({**consumer_settings(client), "error_cb": errors.record})
    partition = TopicPartition(span.topic, span.partition)
    next_offset = span.start
    stall: Outage | None = None
    try:
        consumer.assign([TopicPartition(span.topic, span.partition, next_offset)])
        deadline = time.monotonic() + poll_timeout_ms / 1000
        while next_offset < span.end:
            asked = min(reads.count(), span.end - next_offset)
            messages = consumer.consume(asked, _CONSUME_WAIT_S)
            failed = [m for m in messages if m.error() is not None]
            if failed:
                resume, reassign = _on_errors(consumer, span, next_offset, failed, fail_on_data_loss, errors,
                                              on_loss or (lambda: None))
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
                if stall is not None:
                    _log_recovered(stall)
                    stall = None
                yield messages, asked
                continue
            position = consumer.position([partition])[0].offset
            if position >= span.end:
                return  # the rest of the range holds no records (compaction, transaction markers)
            if errors.permanent is not None:
                raise permanent_error(errors.permanent, f"reading {span.topic}-{span.partition}")
            if time.monotonic() > deadline:
                stall = stall or Outage(retry, f"reading {span.topic}-{span.partition} at offset {next_offset} "
                                               f"(range ends at {span.end})",
                                        started_ms=(deadline * 1000 - poll_timeout_ms))
                _waited_too_long(stall, errors, poll_timeout_ms)
                deadline = time.monotonic() + poll_timeout_ms / 1000
    finally:
        consumer.close()


def _waited_too_long(stall: Outage, errors: ClientErrors, poll_timeout_ms: int) -> None:
    """One more kafkaConsumer.pollTimeoutMs without a record: warn, or fail past the max wait."""
    why = errors.last_transient or f"no record within kafkaConsumer.pollTimeoutMs={poll_timeout_ms}"
    try:
        step = stall.failed(time.monotonic() * 1000, why)
    except BrokerUnavailableError as exc:
        raise FetchTimeoutError(f"{exc}; each wait lasts kafkaConsumer.pollTimeoutMs={poll_timeout_ms}. Fix: check "
                                "that the broker is reachable from the executors") from None
    if step.warning:
        log.warning(step.warning)


def _log_recovered(stall: Outage) -> None:
    closing = stall.recovered(time.monotonic() * 1000)
    if closing:
        log.warning(closing)


def _on_errors(consumer, span: OffsetRange, next_offset: int, failed: list,
               fail_on_data_loss: bool, errors: ClientErrors, on_loss) -> tuple[int | None, bool]:
    """Where to continue after consumer errors (None: the range is finished) and whether the
    consumer must be re-assigned there."""
    from confluent_kafka import KafkaError, TopicPartition

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
            on_loss()
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                log.warning("%s: partition is gone, skipping records up to %d (failOnDataLoss=false)", where, span.end)
                return None, False
            low, high = consumer.get_watermark_offsets(TopicPartition(span.topic, span.partition), cached=False)
            if next_offset > high:
                # The log now ends before the range: the topic was re-created (or truncated) after
                # the batch was planned. The range's records are gone; the new log's records are the
                # next batches' (planned from the reset offsets). Read from 0 instead, this range
                # would wait for offsets up to its end that the new log might reach minutes later.
                log.warning("%s is past the partition's end %d (re-created or truncated): records up to %d "
                            "are lost (failOnDataLoss=false)", where, high, span.end)
                return None, False
            resume = max(low, next_offset)
            log.warning("%s is out of range [%d, %d): continuing from %d (failOnDataLoss=false)",
                        where, low, high, resume)
            return (resume if resume < span.end else None), True
        if is_permanent(error):
            raise permanent_error(error, f"reading {span.topic}-{span.partition}")
        errors.record(error)
        log.info("%s-%d: transient consumer error %s", span.topic, span.partition, error.str())
    return next_offset, False
