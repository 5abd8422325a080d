"""Produce the collector's events to the events topic, keyed as docs/CONTRACTS.md says.

librdkafka keeps what the events cluster has not acknowledged yet and retries it for as long as
it takes (``message.timeout.ms`` 0: no deadline), so an outage of the events cluster delays events
and loses none; only a full local queue drops, and every drop is counted and shown.
"""

from __future__ import annotations

from typing import IO, Mapping

from streaming.events import write_jsonl
from streaming.tools.simulate.writers import producer_config
from udfs import avro_codec
from udfs.kafka_sink import event_key


class EventPublisher:
    def __init__(self, bootstrap_servers: str, topic: str, *, encoding: str = "confluent",
                 client: Mapping[str, str] | None = None, max_queued: int = 100_000, copy_to: IO[str] | None = None):
        from confluent_kafka import Producer

        self.topic, self.encoding, self.copy_to = topic, encoding, copy_to
        self.sent = self.failed = self.dropped = 0
        self.first_error: str | None = None
        config = {**producer_config(bootstrap_servers, client), "linger.ms": 5, "message.timeout.ms": 0,
                  "queue.buffering.max.messages": max_queued, "on_delivery": self._delivered}
        self._producer = Producer(config)

    def _delivered(self, err, _msg) -> None:
        if err is None:
            self.sent += 1
        else:
            self.failed += 1
            self.first_error = self.first_error or str(err)

    def publish(self, events: list[dict]) -> None:
        if self.copy_to is not None:  # `epochwatch collect --events-out`: what the job was told
            write_jsonl(events, self.copy_to)
        for event in events:
            if self.encoding == "schemaless":
                value = avro_codec.encode_schemaless(event)
                headers = [(avro_codec.EVENT_TYPE_HEADER, event["event_type"].encode())]
            else:
                value, headers = avro_codec.encode(event), None
            try:
                self._producer.produce(self.topic, value, event_key(event), headers=headers)
            except BufferError:
                self.dropped += 1
        self._producer.poll(0)

    @property
    def queued(self) -> int:
        return 0 if self._producer is None else len(self._producer)

    def flush(self, timeout_s: float) -> int:
        """What is still unacknowledged after ``timeout_s``."""
        return self._producer.flush(timeout_s)

    def close(self, timeout_s: float = 10.0) -> int:
        """Deliver what is queued, then let the client go now (not at garbage collection), so that
        it stops reconnecting, and logging, once the events cluster is gone. Returns what was left."""
        left = self._producer.flush(timeout_s) if self._producer is not None else 0
        self._producer = None
        return left
