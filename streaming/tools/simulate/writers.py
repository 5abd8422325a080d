"""Where simulated events go: a JSON Lines file, or a Kafka topic in the wire format with the
message keys of docs/CONTRACTS.md (one entity's events stay in order in one partition)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable, Iterable, Mapping

from streaming import events as contract
from udfs import avro_codec
from udfs.kafka_sink import event_key  # one key rule for every producer (docs/CONTRACTS.md)


def write_jsonl_file(events: Iterable[dict], path: str | Path) -> int:
    with open(path, "w", encoding="utf-8") as out:
        return contract.write_jsonl(events, out)


class KafkaWriteError(RuntimeError):
    pass


@dataclass(frozen=True)
class ProduceStats:
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0


def producer_config(bootstrap_servers: str, client: Mapping[str, str] | None = None) -> dict:
    """Idempotent, acks=all, lz4, batched: loads millions of small records quickly and safely.
    ``client`` (librdkafka settings such as security.protocol / sasl.*) is applied last."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": 50,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 500_000,
        "queue.buffering.max.kbytes": 512 * 1024,
        **dict(client or {}),
    }


class KafkaEventWriter:
    """Produce events to one topic; ``write`` returns when every record is acknowledged."""

    def __init__(self, bootstrap_servers: str, topic: str, *, encoding: str = "confluent",
                 catalog: avro_codec.SchemaCatalog | None = None, client: Mapping[str, str] | None = None,
                 progress: IO[str] | None = sys.stderr, progress_every_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic):
        if encoding not in ("confluent", "schemaless"):
            raise ValueError(f"encoding {encoding!r}: use confluent or schemaless")
        from confluent_kafka import Producer

        self.topic, self.encoding, self.catalog = topic, encoding, catalog
        self.progress, self.progress_every_s, self.clock = progress, progress_every_s, clock
        self.failed = 0
        self.first_error: str | None = None
        self._producer = Producer({**producer_config(bootstrap_servers, client), "on_delivery": self._delivered})

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.failed += 1
            self.first_error = self.first_error or str(err)

    def write(self, events: Iterable[dict], flush_timeout_s: float = 120.0) -> ProduceStats:
        producer, topic, catalog = self._producer, self.topic, self.catalog
        schemaless = self.encoding == "schemaless"
        started = last_report = self.clock()
        count = 0
        for event in events:
            if schemaless:
                value = avro_codec.encode_schemaless(event)
                headers = [(avro_codec.EVENT_TYPE_HEADER, event["event_type"].encode())]
            else:
                value, headers = avro_codec.encode(event, catalog), None
            key = event_key(event)
            while True:
                try:
                    producer.produce(topic, value, key, headers=headers)
                    break
                except BufferError:  # the local queue is full: let librdkafka deliver some
                    producer.poll(0.05)
            count += 1
            if count % 5000 == 0:
                producer.poll(0)
                now = self.clock()
                if self.progress is not None and now - last_report >= self.progress_every_s:
                    last_report = now
                    self._report(count, now - started, "produced")
        remaining = producer.flush(flush_timeout_s)
        seconds = self.clock() - started
        if remaining or self.failed:
            raise KafkaWriteError(f"{self.failed + remaining} of {count} events not acknowledged "
                                  f"(first error: {self.first_error or 'flush timed out'})")
        if self.progress is not None and seconds >= self.progress_every_s:
            self._report(count, seconds, "done")
        return ProduceStats(count, seconds)

    def __enter__(self) -> "KafkaEventWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self, flush_timeout_s: float = 30.0) -> None:
        """Deliver what is queued and let the client go now: its delivery callback holds it in a
        reference cycle, so without this it lives (and logs connection failures once the broker
        is gone) until the garbage collector finds it."""
        if self._producer is not None:
            self._producer.flush(flush_timeout_s)
            self._producer = None

    def _report(self, count: int, seconds: float, what: str) -> None:
        rate = count / seconds if seconds > 0 else 0.0
        print(f"epochwatch simulate: {what} {count:,} events to {self.topic} in {seconds:.1f} s ({rate:,.0f}/s)",
              file=self.progress, flush=True)
