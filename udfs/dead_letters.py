"""Dead letters: records the source could not decode, and how they reach the dead-letter topic.

A dead-letter record keeps the original key and value bytes and carries its story in headers,
as Kafka Connect's DLQ context headers do:

    epochwatch.dlq.reason          short code (bad_magic_byte, unknown_schema_id, truncated_avro, ...)
    epochwatch.dlq.detail          a human sentence
    epochwatch.dlq.truncated       "true" when key or value were cut to fit (see below), else "false"
    epochwatch.source.topic / .partition / .offset / .timestamp   where it came from (ms)
    epochwatch.source.key.size / .value.size   the original's sizes in bytes (empty: null)

A record may be as large as its producer and the broker allowed, which can be more than the
dead-letter producer's ``message.max.bytes``: the same bytes plus headers would then be refused,
the batch would fail, and fail again on every replay. So a dead letter that would not fit keeps
as much of the original as fits (:meth:`DeadLetter.fitted`), marked truncated, its sizes in
headers: the coordinates lead to the whole record while the topic retains it.

Two ways in: the source produces them itself (option ``deadLetterTopic``), or the job gets them
as rows (``event_type`` null, ``dlq_*`` and ``raw_*`` set) and calls
:func:`publish_dead_letter_rows` from foreachBatch. Both return / log counts by reason.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping

from udfs.producing import ReliableProducer

log = logging.getLogger("epochwatch.dead_letters")

REASON_HEADER = "epochwatch.dlq.reason"
DETAIL_HEADER = "epochwatch.dlq.detail"
ROW_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset", "kafka_timestamp", "dlq_reason", "dlq_detail",
               "raw_key", "raw_value")
SOURCE_HEADERS = ("epochwatch.source.topic", "epochwatch.source.partition", "epochwatch.source.offset",
                  "epochwatch.source.timestamp")
TRUNCATED_HEADER = "epochwatch.dlq.truncated"
SIZE_HEADERS = ("epochwatch.source.key.size", "epochwatch.source.value.size")
# librdkafka's default message.max.bytes: it refuses a larger record (key + value + headers)
DEFAULT_MESSAGE_MAX_BYTES = 1_000_000
# Room for what Kafka adds around a record (record and batch headers, varints): about 100 bytes.
RECORD_OVERHEAD = 512
# A key kept whole would leave no room for the value when both are huge; the value says more.
MAX_KEY_BYTES = 4096
# Details are ours, but some quote what a decoder said about hostile bytes.
MAX_DETAIL_CHARS = 1000


@dataclass(frozen=True)
class DeadLetter:
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    reason: str
    detail: str

    def headers(self, truncated: bool = False) -> list[tuple[str, bytes]]:
        context = (self.topic, self.partition, self.offset, "" if self.timestamp_ms is None else self.timestamp_ms)
        sizes = ("" if data is None else len(data) for data in (self.key, self.value))
        return ([(REASON_HEADER, self.reason.encode()), (DETAIL_HEADER, self.detail[:MAX_DETAIL_CHARS].encode()),
                 (TRUNCATED_HEADER, b"true" if truncated else b"false")]
                + [(name, str(value).encode()) for name, value in zip(SOURCE_HEADERS, context)]
                + [(name, str(size).encode()) for name, size in zip(SIZE_HEADERS, sizes)])

    def fitted(self, max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES) -> tuple[bytes | None, bytes | None, list]:
        """(key, value, headers) of the record to produce: key and value as they are when the
        record fits ``max_bytes`` (the producer's message.max.bytes), else cut: the key to at
        most MAX_KEY_BYTES, the value to what is left."""
        headers = self.headers()
        room = max_bytes - RECORD_OVERHEAD - _headers_size(headers)
        key, value = self.key, self.value
        if len(key or b"") + len(value or b"") <= room:
            return key, value, headers
        key = None if key is None else key[:min(MAX_KEY_BYTES, max(room, 0))]
        value = None if value is None else value[:max(room - len(key or b""), 0)]
        return key, value, self.headers(truncated=True)

    @classmethod
    def from_row(cls, row: Any) -> "DeadLetter":
        """From a decoded-source row (a Spark Row or a dict) whose ``dlq_reason`` is set."""
        try:
            stamp = row["kafka_timestamp"]
            _ = [row[name] for name in ROW_COLUMNS]
        except (KeyError, ValueError) as exc:
            raise ValueError(f"a dead-letter row needs the columns {', '.join(ROW_COLUMNS)} of the decoded "
                             f"source; missing {exc}. Fix: pass the rows before selecting columns") from None
        if isinstance(stamp, datetime):
            stamp = int((stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp() * 1000)
        return cls(
            topic=row["kafka_topic"], partition=int(row["kafka_partition"]), offset=int(row["kafka_offset"]),
            timestamp_ms=stamp, key=_bytes(row["raw_key"]), value=_bytes(row["raw_value"]),
            reason=row["dlq_reason"], detail=row["dlq_detail"] or "",
        )


def _bytes(value) -> bytes | None:
    return None if value is None else bytes(value)


def _headers_size(headers: list[tuple[str, bytes]]) -> int:
    # each header: its name and value plus two varint lengths (at most 5 bytes each)
    return sum(len(name.encode()) + len(value) + 10 for name, value in headers)


def message_max_bytes(client_settings: Mapping[str, str]) -> int:
    """The producer's record size limit: librdkafka's message.max.bytes as configured."""
    value = client_settings.get("message.max.bytes")
    return DEFAULT_MESSAGE_MAX_BYTES if value is None else int(value)


def headers_to_dict(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Dead-letter headers as text (for tests and tools reading the DLQ back)."""
    return {k: (v.decode() if v is not None else None) for k, v in (headers or [])}


class DeadLetterPublisher:
    """Produces dead letters to one topic; keep one per job (or per task) and call publish()."""

    def __init__(self, client_settings: Mapping[str, str], topic: str, retry=None):
        """``retry`` (udfs.kafka_retry.RetryPolicy): flush() waits out an unreachable broker."""
        self.topic = topic
        self._retry = retry
        self._settings = dict(client_settings)
        # made at the first dead letter: every read task of the live job has a publisher, and
        # most never need one (a producer costs threads and connections)
        self._producer: ReliableProducer | None = None
        self.max_bytes = message_max_bytes(client_settings)
        self.counts: Counter = Counter()

    def add(self, letters: Iterable[DeadLetter]) -> None:
        """Produce without waiting; call flush() before reporting success."""
        for letter in letters:
            if self._producer is None:
                self._producer = ReliableProducer(self._settings, retry=self._retry,
                                                  what=f"producing dead letters to {self.topic}")
            key, value, headers = letter.fitted(self.max_bytes)
            self._producer.produce(self.topic, value=value, key=key, headers=headers)
            self.counts[letter.reason] += 1

    def flush(self) -> Counter:
        """Wait for the broker; raises DeliveryError if it did not take every record. Returns the
        counts by reason since the last flush."""
        if self._producer is not None:
            self._producer.flush()
        counts, self.counts = self.counts, Counter()
        return counts

    def publish(self, letters: Iterable[DeadLetter]) -> Counter:
        self.add(letters)
        return self.flush()


def publish_dead_letter_rows(rows: Iterable[Any], client_settings: Mapping[str, str] | str,
                             topic: str, publisher: DeadLetterPublisher | None = None) -> Counter:
    """Write the malformed rows of the decoded source (``dlq_reason`` set) to ``topic``.

    For foreachBatch: ``publish_dead_letter_rows(df.where("dlq_reason IS NOT NULL").toLocalIterator(),
    {"bootstrap.servers": ...}, "epochwatch.dlq")``. Rows without ``dlq_reason`` are skipped.
    Returns the number of records written per reason (feed it to epochwatch_dead_letters_total).
    """
    if isinstance(client_settings, str):
        client_settings = {"bootstrap.servers": client_settings}
    publisher = publisher or DeadLetterPublisher(client_settings, topic)
    return publisher.publish(DeadLetter.from_row(row) for row in rows if row["dlq_reason"] is not None)


def summary_line(counts: Counter, where: str, topic: str) -> str:
    """One log line per read task: counts only, never headers or payloads."""
    by_reason = ", ".join(f"{reason}={n}" for reason, n in sorted(counts.items()))
    return f"dead-lettered {sum(counts.values())} record(s) from {where} to {topic}: {by_reason}"
