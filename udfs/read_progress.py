"""How far in event time the events topic has been read, when some partitions are behind
(driver side).

With ``maxOffsetsPerTrigger`` the partitions of the events topic advance unevenly: a budget shared
by backlog lets a partition of sparse events run ahead of one of dense events in event time. The
newest event read (the packs' clock, and Spark's watermark with it) then passes heartbeats that
wait unread in the partition behind, and the horizon times out a broker that never went quiet.
So the planner asks, for each partition that still has records past the batch's end, the event
time of its first unread record, and the batch's clock may not pass the earliest of them
(streaming.spark.packs.pack caps it; Flink's per-partition watermarks do the same with a minimum).

A partition read to its end is not behind: its next events are still to be written, and the
lateness allowance is for them. The first unread record stands for the partition's unread events:
a producer writes a partition in about event-time order (an idempotent one never reorders on a
retry); disorder beyond the lateness allowance is late either way.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Mapping

from udfs.offsets import TopicPartition

log = logging.getLogger("epochwatch.kafka_source")

PEEK_MESSAGES = 1000  # per consume call: a fetch can hand over thousands of a partition's records at once
PEEK_BYTES = 65536


def lagging(until: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """The partitions with records at or past the batch's end offset: tp -> first unread offset."""
    return {tp: end for tp, end in until.items() if latest.get(tp, end) > end}


def event_time_of(message, decode: Callable) -> int | None:
    """The record's event time: the decoded event's, else the record's own timestamp (a record
    that does not decode goes to the dead letters, but its neighbours were written about then)."""
    rows, _ = decode([message.value()], [message])
    if rows and rows[0] is not None:
        return int(rows[0]["event_time"])
    kind, stamp = message.timestamp()
    return stamp if kind != 0 and stamp >= 0 else None   # 0: TIMESTAMP_NOT_AVAILABLE


class NextEventTimes:
    """Peeks at the first unread record of lagging partitions, with one consumer kept across
    batches (the planner's process lives as long as the query)."""

    def __init__(self, client: Mapping[str, str], decoder_for: Callable[[str], Callable], wait_ms: int):
        self._client, self._decoder_for, self._wait_ms = dict(client), decoder_for, wait_ms
        self._consumer = None
        self._decoders: dict[str, Callable] = {}   # one per topic, kept: each keeps the schemas it resolved
        self._known: dict[TopicPartition, int] = {}   # the last answer per partition, for one that is slow

    def clock_cap(self, lagging_partitions: Mapping[TopicPartition, int]) -> int | None:
        """The earliest event time among the first unread records; None when nothing is behind."""
        if not lagging_partitions:
            return None
        found = self._peek(lagging_partitions)
        for tp, stamp in found.items():
            self._known[tp] = stamp
        times = [found.get(tp, self._known.get(tp)) for tp in lagging_partitions]
        missing = [f"{t}-{p}" for (t, p), stamp in zip(lagging_partitions, times) if stamp is None]
        if missing:
            log.warning("no event time for the first unread record of %s within %d ms: the batch's clock "
                        "is not held back for them", ", ".join(missing), self._wait_ms)
        known = [stamp for stamp in times if stamp is not None]
        return min(known) if known else None

    def _peek(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        consumer = self._consumer_once()
        consumer.assign([KafkaTopicPartition(t, p, offset) for (t, p), offset in offsets.items()])
        found: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + self._wait_ms / 1000
        while len(found) < len(offsets) and time.monotonic() < deadline:
            for message in consumer.consume(PEEK_MESSAGES, 0.2):
                tp = (message.topic(), message.partition())
                if message.error() is not None or tp in found or tp not in offsets or message.offset() < offsets[tp]:
                    continue
                if message.topic() not in self._decoders:
                    self._decoders[message.topic()] = self._decoder_for(message.topic())
                stamp = event_time_of(message, self._decoders[message.topic()])
                if stamp is not None:
                    found[tp] = stamp
                    # the rest of what was fetched for it is dropped unread, and no more is fetched
                    consumer.pause([KafkaTopicPartition(*tp)])
        paused = [KafkaTopicPartition(t, p) for t, p in found]
        if paused:
            consumer.resume(paused)   # a pause outlives the assignment: the next batch's peek needs them
        consumer.unassign()   # no fetching in the background between batches
        return found

    def _consumer_once(self):
        if self._consumer is None:
            from confluent_kafka import Consumer

            from udfs.partition_reader import consumer_settings

            # One record per partition is wanted: no prefetching of megabytes behind it. The whole
            # fetch is capped too (fetch.max.bytes; message.max.bytes may not exceed it): a broker
            # may answer past the per-partition cap (Kafka with a whole producer batch, tansu with
            # the rest of the partition), and a full queue holds every partition's next fetch back
            # for fetch.queue.backoff.ms, 1 s by default. Seconds of a backlog batch's planning
            # before (bench/HISTORY.md, session 23).
            self._consumer = Consumer({**consumer_settings(self._client), "fetch.wait.max.ms": 10,
                                       "max.partition.fetch.bytes": PEEK_BYTES, "fetch.max.bytes": PEEK_BYTES,
                                       "message.max.bytes": PEEK_BYTES, "queued.max.messages.kbytes": 1024,
                                       "fetch.queue.backoff.ms": 10})
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
