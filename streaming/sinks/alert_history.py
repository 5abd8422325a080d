"""The alerts topic read back at start-up: the latest record per fingerprint, which seeds
Alertmanager delivery and the firing gauges after a restart (streaming.commands.run).

The read is done when every partition's position has reached the end offset it had when the
read began: anything short of that would seed from a partial history (a resolution not read yet
re-sends a resolved incident as firing). An unreachable broker is waited out as the source waits
(kafka.fetchOffset.*; kafka.brokerUnavailable.maxWaitMs bounds the wait and names itself when it
gives up). Records are folded into the latest state per fingerprint as they come, so memory
grows with the incidents, not with the records.

Records are decoded as the sink wrote them: the Confluent wire format with the built-in ids, or
the Schema Registry's (kafka.schema.registry.url: the ids are looked up there, waited for as the
sink waits), or schemaless with the ``event_type`` header. A record that is not an alert this job
can decode is skipped and counted in one WARNING at the end.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from streaming.config import Settings
from streaming.sinks.alert_book import latest_alert_states
from streaming.sinks.labels import as_emitted

log = logging.getLogger("epochwatch")
CONSUME_WAIT_S = 0.5


def read_alert_history(settings: Settings, clock=time.monotonic) -> dict[str, dict]:
    """Fingerprint -> the latest alert record in ``kafka.topics.alerts``, labelled as the rules
    emit it (the topic holds them as ``sinks.labels`` presented them)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    from udfs.kafka_retry import Outage, call_with_retry, is_transient

    k = settings.kafka
    policy = k.retry_policy()
    what = f"reading the alert history of {k.alerts_topic}"
    consumer = Consumer({**dict(k.client), "bootstrap.servers": k.bootstrap_servers,
                         "group.id": "epochwatch-alert-history", "enable.auto.commit": False})
    catalog = k.registry_catalog(k.alerts_topic)
    skipped = Skipped(k.alerts_topic)

    def topic_partitions(timeout_s: float) -> list[int]:
        topic = consumer.list_topics(k.alerts_topic, timeout=timeout_s).topics.get(k.alerts_topic)
        if topic is not None and topic.error is not None and is_transient(topic.error):
            raise KafkaException(topic.error)   # leaders moving: ask again
        return [] if topic is None or topic.error is not None else sorted(topic.partitions)

    try:
        partitions = call_with_retry(topic_partitions, policy, what)
        ends = {p: call_with_retry(lambda t, p=p: consumer.get_watermark_offsets(
                    TopicPartition(k.alerts_topic, p), timeout=t), policy, what) for p in partitions}
        short = {p: high for p, (low, high) in ends.items() if high > low}   # partitions with records
        if not short:
            return {}
        consumer.assign([TopicPartition(k.alerts_topic, p, OFFSET_BEGINNING) for p in short])
        latest: dict[str, dict] = {}
        outage, progress_ms = None, clock() * 1000
        while short:
            records = _decoded(consumer.consume(1000, timeout=CONSUME_WAIT_S), catalog, skipped)
            latest_alert_states(records, latest)
            for tp in consumer.position([TopicPartition(k.alerts_topic, p) for p in short]):
                if tp.offset >= short[tp.partition]:
                    del short[tp.partition]
            now_ms = clock() * 1000
            if records:
                if outage is not None and (closing := outage.recovered(now_ms)):
                    log.warning(closing)
                outage, progress_ms = None, now_ms
            elif now_ms - progress_ms >= policy.attempt_timeout_ms and short:
                outage = outage or Outage(policy, what, progress_ms)
                step = outage.failed(now_ms, f"no records for {(now_ms - progress_ms) / 1000:.0f} s, "
                                             f"{len(short)} partition(s) short of their end offsets")
                if step.warning:
                    log.warning(step.warning)
                progress_ms = now_ms
        skipped.report()
        # in the rules' form: the labels of whatever sinks.labels wrote them (streaming.sinks.labels)
        return {fp: as_emitted(record) for fp, record in latest.items()}
    finally:
        consumer.close()


class Skipped:
    """The records of the alerts topic the read could not use, said once at the end."""

    def __init__(self, topic: str):
        self.topic, self.reasons, self.first = topic, Counter(), None

    def add(self, msg, exc) -> None:
        self.reasons[exc.reason] += 1
        self.first = self.first or f"{msg.partition()}@{msg.offset()}: {exc}"

    def report(self) -> None:
        if self.reasons:
            log.warning("alert history: %d record(s) of %s skipped, not alerts this job can decode (%s; first at %s)",
                        sum(self.reasons.values()), self.topic,
                        ", ".join(f"{reason} {n}" for reason, n in self.reasons.most_common()), self.first)


def _decoded(messages, catalog, skipped: Skipped) -> list[dict]:
    from udfs import avro_codec

    out = []
    for msg in messages:
        if msg.error() is not None:
            continue   # transport errors: the position does not move, the loop waits
        try:
            record = _decode(msg, catalog)
        except avro_codec.DecodeError as exc:
            skipped.add(msg, exc)
            continue
        if record.get("event_type") == "alert":
            out.append(record)
    return out


def _decode(msg, catalog) -> dict:
    """A record as the sink wrote it: schemaless when a header names its event type."""
    from udfs import avro_codec

    for name, value in msg.headers() or ():
        if name == avro_codec.EVENT_TYPE_HEADER and value is not None:
            return avro_codec.decode_schemaless(msg.value(), value.decode("utf-8", "replace"))
    return avro_codec.decode(msg.value(), catalog)
