"""A confluent-kafka Producer that never loses a delivery error.

Idempotent (``enable.idempotence=true``, ``acks=all``); ``flush()`` raises :class:`DeliveryError`
when any record of the batch failed or was still undelivered at the deadline, so that the caller
(a Spark task, a foreachBatch) fails and is retried instead of reporting success.
"""

from __future__ import annotations

from typing import Mapping, Sequence

RELIABLE_SETTINGS = {"enable.idempotence": True, "acks": "all"}
FLUSH_TIMEOUT_S = 60.0


class DeliveryError(RuntimeError):
    """Records that the broker did not acknowledge; ``errors`` holds (topic, error text) pairs."""

    def __init__(self, errors: Sequence[tuple[str, str]], undelivered: int = 0):
        parts = [f"{len(errors)} record(s) failed"] if errors else []
        if undelivered:
            parts.append(f"{undelivered} record(s) still undelivered at the flush deadline")
        sample = "; ".join(f"{topic}: {text}" for topic, text in errors[:3])
        super().__init__(", ".join(parts) + (f" (first errors: {sample})" if sample else ""))
        self.errors = list(errors)
        self.undelivered = undelivered


class ReliableProducer:
    def __init__(self, client_settings: Mapping[str, str], flush_timeout_s: float = FLUSH_TIMEOUT_S):
        from confluent_kafka import Producer

        settings = {"linger.ms": 20, **dict(client_settings), **RELIABLE_SETTINGS}
        self._producer = Producer(settings)
        self._errors: list[tuple[str, str]] = []
        self._flush_timeout_s = flush_timeout_s
        self.sent = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._errors.append((msg.topic() if msg is not None else "?", str(err)))

    def produce(self, topic: str, value: bytes | None, key: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, partition: int | None = None) -> None:
        kwargs = {"value": value, "key": key, "headers": headers, "on_delivery": self._on_delivery}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                self._producer.produce(topic, **kwargs)
                break
            except BufferError:  # local queue full: let deliveries drain, then retry
                self._producer.poll(0.1)
        self.sent += 1
        if self.sent % 1000 == 0:
            self._producer.poll(0)

    def flush(self) -> int:
        """Wait for every record; raise DeliveryError if any failed. Returns the records sent."""
        undelivered = self._producer.flush(self._flush_timeout_s)
        errors, self._errors = self._errors, []
        sent, self.sent = self.sent, 0
        if errors or undelivered:
            raise DeliveryError(errors, undelivered)
        return sent
