"""Read a task's offset ranges [start, end) of Kafka partitions (runs on executors).

One consumer is assigned every range's partition at its ``start`` (no consumer group, no
commits) and reads each until its ``end`` and never past it: Spark's checkpoint holds the
offsets, so a retried task or a restarted query reads exactly the same records. Gaps (compacted
topics, transaction markers) are fine: a range is done once the consumer's position reaches its
``end``.

A broker that is slow or unreachable is waited for: every ``kafkaConsumer.pollTimeoutMs``
without a record the wait is checked against ``brokerUnavailable.maxWaitMs`` (default: forever)
and a WARNING says for how long (at most every 30 s). Authentication, TLS and ACL errors, which
librdkafka reports through ``error_cb``, fail the read at once.
"""

from __future__ import annotations

import itertools
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
    # How long librdkafka postpones a partition's next fetch once its prefetch queue has passed
    # queued.min.messages or queued.max.messages.kbytes: 1 s by default. With it, a task reading
    # two ranges of a backlog waited ~0.9 s for the second range's records once the first had
    # ended (the task 1.1-1.2 s, against 0.25 s at 10 ms: bench/HISTORY.md, session 45). The
    # planner's peek (udfs/read_progress.py) met the same wait in session 23 and forces 10 ms too.
    "fetch.queue.backoff.ms": 10,
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


def fetch_ranges(client: Mapping[str, str], spans: list[OffsetRange], *, chunk_size: int, poll_timeout_ms: int,
                 fail_on_data_loss: bool, retry: RetryPolicy = RetryPolicy(), chunk_bytes: int = CHUNK_BYTES,
                 on_loss=None) -> Iterator[tuple[OffsetRange, list]]:
    """Yield (range, chunk) until every range is read: each chunk messages of one range in offset
    order, the chunks of different ranges as their records come; the chunks passed on together
    hold at most ``chunk_size`` messages and about ``chunk_bytes`` (they end at the read that
    reaches it). ``on_loss()`` is called each time records are skipped as lost
    (failOnDataLoss=false), to be counted.

    One consumer reads all the ranges at once: a consumer costs ~8 ms to its first records and
    to close (bench/HISTORY.md, session 30), paid per range when a task read them one after the
    other, and a live task holds several partitions' ranges. Ranges of the same partition are
    read one after the other, each with a consumer of its own."""
    for wave in _waves(spans):
        reads = _Reads(chunk_size, chunk_bytes)
        gathered: dict[OffsetRange, list] = {}  # per range: messages not passed on yet
        count = size = 0  # of all of them: the bounds hold for the task, not for each range
        for got, asked in _read_ranges(client, wave, reads, poll_timeout_ms, fail_on_data_loss, retry, on_loss):
            for span, messages in got.items():
                gathered.setdefault(span, []).extend(messages)
                count += len(messages)
                size += reads.saw(messages)
            # a read that got fewer records than it asked for found no more waiting: pass them on
            if count >= chunk_size or size >= chunk_bytes or sum(map(len, got.values())) < asked:
                yield from gathered.items()
                gathered, count, size = {}, 0, 0
            reads.room = chunk_size - count
        yield from gathered.items()


def _waves(spans: list[OffsetRange]) -> list[list[OffsetRange]]:
    """The ranges in groups of distinct partitions, a partition's ranges in their order (a task
    holds two of one partition only when a batch split it: udfs.offsets.split_ranges)."""
    waves: list[list[OffsetRange]] = []
    for span in spans:
        if span.start >= span.end:
            continue
        wave = next((w for w in waves if all((s.topic, s.partition) != (span.topic, span.partition) for s in w)), None)
        if wave is None:
            waves.append([span])
        else:
            wave.append(span)
    return waves


class _Reads:
    """How many records the next read asks for (see CHUNK_BYTES)."""

    def __init__(self, chunk_size: int, chunk_bytes: int):
        self.chunk_bytes = chunk_bytes
        self.room = chunk_size  # records the chunks being gathered still take
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


def _read_ranges(client: Mapping[str, str], spans: list[OffsetRange], reads: _Reads, poll_timeout_ms: int,
                 fail_on_data_loss: bool, retry: RetryPolicy,
                 on_loss=None) -> Iterator[tuple[dict[OffsetRange, list], int]]:
    """({range: its messages} of each read that got some, how many were asked for), covering the
    ranges (of distinct partitions)."""
    from confluent_kafka import Consumer, TopicPartition

    errors = ClientErrors()
    consumer = Consumer({**consumer_settings(client), "error_cb": errors.record})
    reading = {(s.topic, s.partition): s for s in spans}  # the ranges not finished yet
    next_offset = {s: s.start for s in spans}
    stall: Outage | None = None

    def finished(span: OffsetRange) -> None:
        del reading[span.topic, span.partition]
        consumer.pause([TopicPartition(span.topic, span.partition)])  # records past its end are the next batch's

    try:
        consumer.assign([TopicPartition(s.topic, s.partition, s.start) for s in spans])
        deadline = time.monotonic() + poll_timeout_ms / 1000
        while reading:
            asked = min(reads.count(), sum(s.end - next_offset[s] for s in reading.values()))
            messages = consumer.consume(asked, _CONSUME_WAIT_S)
            failed = [m for m in messages if m.error() is not None]
            if failed:
                reassign = _on_errors(consumer, reading, next_offset, failed, fail_on_data_loss, errors,
                                      on_loss or (lambda: None))
                for span in [s for s in reading.values() if next_offset[s] >= s.end]:
                    finished(span)
                if reassign:
                    consumer.assign([TopicPartition(s.topic, s.partition, next_offset[s]) for s in reading.values()])
                    deadline = time.monotonic() + poll_timeout_ms / 1000
                    continue
            got = _in_ranges([m for m in messages if m.error() is None] if failed else messages, reading, next_offset)
            for span, mine in got.items():
                next_offset[span] = mine[-1].offset() + 1
                if next_offset[span] >= span.end:
                    finished(span)
            if got:
                deadline = time.monotonic() + poll_timeout_ms / 1000
                if stall is not None:
                    _log_recovered(stall)
                    stall = None
                yield got, asked
                continue
            positions = consumer.position([TopicPartition(s.topic, s.partition) for s in reading.values()])
            for position in positions:
                span = reading[position.topic, position.partition]
                if position.offset >= span.end:
                    finished(span)  # the rest of the range holds no records (compaction, transaction markers)
            if errors.permanent is not None:
                raise permanent_error(errors.permanent, "reading " + _where(reading.values(), next_offset))
            if reading and time.monotonic() > deadline:
                stall = stall or Outage(retry, "reading " + _where(reading.values(), next_offset),
                                        started_ms=(deadline * 1000 - poll_timeout_ms))
                _waited_too_long(stall, errors, poll_timeout_ms)
                deadline = time.monotonic() + poll_timeout_ms / 1000
    finally:
        consumer.close()


def _topic_partition(message) -> tuple[str, int]:
    return message.topic(), message.partition()


def _in_ranges(messages: list, reading: dict, next_offset: dict) -> dict[OffsetRange, list]:
    """A read's messages of each range still being read, those within [its next offset, its end).
    They come in runs of one partition (a fetch's records at a time), in offset order: a range is
    looked up, and its bounds checked, once a run (per message, that cost a read task ~0.4
    microseconds a record, 2 s of CPU for 5 million; once a run, ~0.1: bench/HISTORY.md)."""
    got: dict[OffsetRange, list] = {}
    for key, run in itertools.groupby(messages, _topic_partition):
        span = reading.get(key)
        if span is None:
            continue  # a finished range's partition: its records past the end are the next batch's
        run = list(run)
        if run[0].offset() < next_offset[span] or run[-1].offset() >= span.end:
            run = [m for m in run if next_offset[span] <= m.offset() < span.end]
        if run:
            got.setdefault(span, []).extend(run)
    return got


def _where(spans, next_offset: dict) -> str:
    return ", ".join(f"{s.topic}-{s.partition} at offset {next_offset[s]} (range ends at {s.end})" for s in spans)


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


def _on_errors(consumer, reading: dict, next_offset: dict, failed: list, fail_on_data_loss: bool,
               errors: ClientErrors, on_loss) -> bool:
    """Handle a read's consumer errors: a range whose records are lost goes on past them (or is
    finished: its ``next_offset`` set to its end). True if the consumer must be re-assigned at
    the ranges' ``next_offset``."""
    from confluent_kafka import KafkaError, TopicPartition

    reassign, handled = False, set()
    for message in failed:
        error = message.error()
        code = error.code()
        span = reading.get((message.topic(), message.partition()))
        if span in handled:
            continue  # a range's loss is counted once a read
        if span is not None and code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE,
                                         KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
            where = f"{span.topic}-{span.partition} offset {next_offset[span]}"
            if fail_on_data_loss:
                raise DataLossError(f"{where}: {error.str()}; records {next_offset[span]}..{span.end - 1} may be lost "
                                    "(deleted by retention, or the topic was re-created). Fix: set "
                                    "failOnDataLoss=false to skip lost records, or restart from a new checkpoint")
            on_loss()
            handled.add(span)
            if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION):
                log.warning("%s: partition is gone, skipping records up to %d (failOnDataLoss=false)", where, span.end)
                next_offset[span] = span.end
                continue
            low, high = consumer.get_watermark_offsets(TopicPartition(span.topic, span.partition), cached=False)
            if next_offset[span] > high:
                # The log now ends before the range: the topic was re-created (or truncated) after
                # the batch was planned. The range's records are gone; the new log's records are the
                # next batches' (planned from the reset offsets). Read from 0 instead, this range
                # would wait for offsets up to its end that the new log might reach minutes later.
                log.warning("%s is past the partition's end %d (re-created or truncated): records up to %d "
                            "are lost (failOnDataLoss=false)", where, high, span.end)
                next_offset[span] = span.end
                continue
            resume = max(low, next_offset[span])
            log.warning("%s is out of range [%d, %d): continuing from %d (failOnDataLoss=false)",
                        where, low, high, resume)
            next_offset[span] = min(resume, span.end)
            reassign = True
            continue
        if is_permanent(error):
            where = f"{span.topic}-{span.partition}" if span is not None else _where(reading.values(), next_offset)
            raise permanent_error(error, f"reading {where}")
        errors.record(error)
        where = f"{span.topic}-{span.partition}" if span is not None else message.topic() or "consumer"
        log.info("%s: transient consumer error %s", where, error.str())
    return reassign
