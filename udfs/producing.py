"""A confluent-kafka Producer that never loses a delivery error.

Idempotent (``enable.idempotence=true``, ``acks=all``); ``flush()`` raises :class:`DeliveryError`
when any record of the batch failed or was still undelivered at the deadline, so that the caller
(a Spark task, a foreachBatch) fails and is retried instead of reporting success.

Given a ``retry`` policy (udfs.kafka_retry.RetryPolicy, the source's), ``flush()`` waits out an
unreachable broker instead, as the source does: records that failed for a transient reason
(timed out in the queue, transport) are produced again, a WARNING at most every 30 s says how
long it has waited, and brokerUnavailable.maxWaitMs, when set, bounds the wait
(BrokerUnavailableError naming it). Errors that waiting does not cure still raise at once.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping, Sequence

from udfs.kafka_retry import Outage, RetryPolicy, describe, is_transient

log = logging.getLogger("epochwatch.producing")

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
    def __init__(self, client_settings: Mapping[str, str], flush_timeout_s: float = FLUSH_TIMEOUT_S,
                 retry: RetryPolicy | None = None, what: str = "producing"):
        from confluent_kafka import Producer

        settings = {"linger.ms": 20, **dict(client_settings), **RELIABLE_SETTINGS}
        self._producer = Producer(settings)
        self._failed: list[tuple[object, object]] = []   # (KafkaError, Message) of failed deliveries
        self._flush_timeout_s = flush_timeout_s
        self._retry, self._what = retry, what
        self.sent = 0

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self._failed.append((err, msg))

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
        """Wait for every record; raise DeliveryError if any failed (with a retry policy: if any
        failed for good). Returns the records sent."""
        if self._retry is not None:
            self._flush_waiting(self._retry)
        undelivered = self._producer.flush(self._flush_timeout_s)
        failed, self._failed = self._failed, []
        sent, self.sent = self.sent, 0
        if failed or undelivered:
            raise DeliveryError(_texts(failed), undelivered)
        return sent

    def _flush_waiting(self, policy: RetryPolicy, clock=time.monotonic, sleep=time.sleep) -> None:
        """Flush in attempts of fetchOffset.timeoutMs until the broker has every record, producing
        again what failed for a transient reason; returns with nothing left (or raises)."""
        outage = None
        while True:
            began_ms = clock() * 1000
            timeout_ms = outage.attempt_timeout_ms(began_ms) if outage else policy.attempt_timeout_ms
            undelivered = self._producer.flush(timeout_ms / 1000)
            failed, self._failed = self._failed, []
            permanent = [(err, msg) for err, msg in failed if not is_transient(err)]
            if permanent:
                raise DeliveryError(_texts(permanent), undelivered)
            if not failed and not undelivered:
                if outage is not None and (closing := outage.recovered(clock() * 1000)):
                    log.warning(closing)
                return
            for _, msg in failed:   # timed out in the queue while the broker was away: once more
                self.produce(msg.topic(), msg.value(), msg.key(), msg.headers(),
                             msg.partition() if msg.partition() >= 0 else None)
                self.sent -= 1   # counted when first produced
            outage = outage or Outage(policy, self._what, began_ms)
            error = describe(failed[0][0]) if failed else f"{undelivered} record(s) not acknowledged yet"
            step = outage.failed(clock() * 1000, error)   # raises BrokerUnavailableError past the limit
            if step.warning:
                log.warning(step.warning)
            if failed:   # failed at once: pause before producing into the same outage again
                sleep(step.delay_ms / 1000)


def _texts(failed) -> list[tuple[str, str]]:
    return [(msg.topic() if msg is not None else "?", str(err)) for err, msg in failed]
