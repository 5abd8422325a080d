"""The alerts topic read back at start-up: the latest record per fingerprint, which seeds
Alertmanager delivery and the firing gauges after a restart (streaming.commands.run).

The read is done when every partition's position has reached the end offset it had when the
read began: anything short of that would seed from a partial history (a resolution not read yet
re-sends a resolved incident as firing). An unreachable broker is waited out as the source waits
(kafka.fetchOffset.*; kafka.brokerUnavailable.maxWaitMs bounds the wait and names itself when it
gives up). Records are folded into the latest state per fingerprint as they come, so memory
grows with the incidents, not with the records.
"""

from __future__ import annotations

import logging
import time

from streaming.config import Settings
from streaming.sinks.alert_book import latest_alert_states

log = logging.getLogger("epochwatch")
CONSUME_WAIT_S = 0.5


def read_alert_history(settings: Settings, clock=time.monotonic) -> dict[str, dict]:
    """Fingerprint -> the latest alert record in ``kafka.topics.alerts``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    from udfs.kafka_retry import Outage, call_with_retry, is_transient

    k = settings.kafka
    policy = k.retry_policy()
    what = f"reading the alert history of {k.alerts_topic}"
    consumer = Consumer({**dict(k.client), "bootstrap.servers": k.bootstrap_servers,
                         "group.id": "epochwatch-alert-history", "enable.auto.commit": False})

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
            records = _decoded(consumer.consume(1000, timeout=CONSUME_WAIT_S))
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
        return latest
    finally:
        consumer.close()


def _decoded(messages) -> list[dict]:
    from udfs import avro_codec

    out = []
    for msg in messages:
        if msg.error() is not None:
            continue   # transport errors: the position does not move, the loop waits
        try:
            record = avro_codec.decode(msg.value())
        except avro_codec.DecodeError as exc:
            log.warning("alerts topic record %s/%s@%s is not an alert: %s", msg.topic(), msg.partition(),
                        msg.offset(), exc)
            continue
        if record.get("event_type") == "alert":
            out.append(record)
    return out
