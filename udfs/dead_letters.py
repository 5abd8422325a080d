"""Dead letters: records the source could not decode, and how they reach the dead-letter topic.

A dead-letter record keeps the original key and value bytes untouched and carries its story in
headers, as Kafka Connect's DLQ context headers do:

    epochwatch.dlq.reason          short code (bad_magic_byte, unknown_schema_id, truncated_avro, ...)
    epochwatch.dlq.detail          a human sentence
    epochwatch.source.topic / .partition / .offset / .timestamp   where it came from (ms)

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

    def headers(self) -> list[tuple[str, bytes]]:
        context = (self.topic, self.partition, self.offset, "" if self.timestamp_ms is None else self.timestamp_ms)
        return ([(REASON_HEADER, self.reason.encode()), (DETAIL_HEADER, self.detail.encode())]
                + [(name, str(value).encode()) for name, value in zip(SOURCE_HEADERS, context)])

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


def headers_to_dict(headers: Iterable[tuple[str, bytes | None]] | None) -> dict[str, str]:
    """Dead-letter headers as text (for tests and tools reading the DLQ back)."""
    return {k: (v.decode() if v is not None else None) for k, v in (headers or [])}


class DeadLetterPublisher:
    """Produces dead letters to one topic; keep one per job (or per task) and call publish()."""

    def __init__(self, client_settings: Mapping[str, str], topic: str):
        self.topic = topic
        self._producer = ReliableProducer(client_settings)

        self.counts: Counter = Counter()

    def add(self, letters: Iterable[DeadLetter]) -> None:
        """Produce without waiting; call flush() before reporting success."""
        for letter in letters:
            self._producer.produce(self.topic, value=letter.value, key=letter.key, headers=letter.headers())
            self.counts[letter.reason] += 1

    def flush(self) -> Counter:
        """Wait for the broker; raises DeliveryError if it did not take every record. Returns the
        counts by reason since the last flush."""
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
