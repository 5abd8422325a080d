"""The job's own Kafka away (a paused broker) while its sinks flush and while it reads the alert
history at start-up: waited out as the source waits, bounded by kafka.brokerUnavailable.maxWaitMs
when set (and then named), and the history read seeds exactly what still fires."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import pytest

from streaming.sinks.alert_book import AlertBook
from streaming.sinks.alert_history import read_alert_history
from streaming.sinks.base import OutputBatch
from streaming.sinks.kafka import KafkaOutputSink
from streaming.tools.embedded import create_topics
from tests.integration.faults.support import TopicTail, live_settings
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

# A record waits this long in librdkafka's queue, then fails as _MSG_TIMED_OUT: shorter than the
# pause, so that the sink sees what a long outage shows, in seconds.
MESSAGE_TIMEOUT_MS = 1500
ATTEMPT_MS = 2000   # kafka.fetchOffset.timeoutMs: one flush or request attempt


@pytest.fixture
def kafka(kafka_cluster_factory):
    """Apache Kafka of the test's own (one controller, one broker) to pause."""
    return kafka_cluster_factory(controllers=1, brokers=1)


def settings_for(kafka, tmp_path, max_wait_ms: int | None = None):
    settings = live_settings(kafka.bootstrap_servers, tmp_path)
    k = dataclasses.replace(settings.kafka, request_timeout_ms=ATTEMPT_MS, broker_max_wait_ms=max_wait_ms,
                            client={"message.timeout.ms": str(MESSAGE_TIMEOUT_MS)})
    create_topics(kafka.bootstrap_servers, {k.alerts_topic: 3, k.dlq_topic: 1})
    return dataclasses.replace(settings, kafka=k)


def alert(fp: str, status: str = "firing", severity: str = "warning", at: int | None = None) -> dict:
    at = at or int(time.time() * 1000)
    return {"event_type": "alert", "event_id": f"{fp}:{status}", "cluster_id": "c1", "event_time": at,
            "fingerprint": fp, "alertname": "BrokerHeartbeatTimeout", "severity": severity, "status": status,
            "labels": {"broker_id": fp, "cluster": "c1"}, "annotations": {"summary": fp},
            "starts_at": at - 10_000, "ends_at": at if status == "resolved" else None}


def dead_letter(offset: int) -> dict:
    return {"reason": "bad_magic_byte", "detail": "not Avro", "kafka_topic": "ev", "kafka_partition": 0,
            "kafka_offset": offset, "kafka_timestamp": None, "raw_key": None, "raw_value": b"\x07junk"}


class InThread:
    """Runs ``call`` on a thread and keeps what it returned or raised."""

    def __init__(self, call):
        self.result = self.error = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call):
        try:
            self.result = call()
        except BaseException as exc:   # noqa: BLE001 (the test judges it)
            self.error = exc

    def join(self, timeout_s: float):
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"still running after {timeout_s} s"
        return self


def test_sinks_wait_out_a_paused_broker_and_deliver_everything(kafka, tmp_path, caplog):
    """Why: a batch's alert records and dead letters waited 60 s for the broker, then failed the
    batch, the query and `epochwatch run` (and a record timed out in librdkafka's queue failed it
    at once); the source meanwhile waits for ever. The sinks now wait as the source does: records
    that timed out in the queue are produced again, and everything arrives once Kafka is back."""
    caplog.set_level(logging.WARNING)
    settings = settings_for(kafka, tmp_path)
    sink = KafkaOutputSink(settings)
    sink.write(OutputBatch(0, alerts=[alert("warm-up")]))   # connected before the outage
    broker = kafka.broker_ids[0]
    kafka.pause(broker)
    try:
        batch = OutputBatch(1, alerts=[alert(f"fp-{i}") for i in range(20)],
                            dead_letters=[dead_letter(i) for i in range(5)])
        writing = InThread(lambda: sink.write(batch))
        wait_until(lambda: "_MSG_TIMED_OUT" in caplog.text or writing.error, timeout_s=60,
                   what="the sink to report records timed out in the queue, and wait on")
        assert writing.error is None and writing.thread.is_alive(), f"the batch failed: {writing.error!r}"
    finally:
        kafka.resume(broker)
    writing.join(120)
    assert writing.error is None, f"the batch failed after the broker came back: {writing.error!r}"
    assert "Kafka reachable again" in caplog.text, "the end of the outage is logged"
    sink.close()
    alerts = TopicTail(kafka.bootstrap_servers, settings.kafka.alerts_topic)
    dlq = TopicTail(kafka.bootstrap_servers, settings.kafka.dlq_topic)
    try:
        wait_until(lambda: {f"fp-{i}" for i in range(20)} <= {key for key, _ in alerts.poll()}, timeout_s=30,
                   what="every alert record of the batch in the alerts topic")
        wait_until(lambda: dlq._consumer.consume(10, timeout=0.5), timeout_s=30, what="the dead letters")
    finally:
        alerts.close()
        dlq.close()


def test_a_sink_gives_up_after_max_wait_naming_the_setting(kafka, tmp_path):
    """Why: an operator who bounds the wait (kafka.brokerUnavailable.maxWaitMs) gets a failed batch
    that says what ran out and which setting to change, not librdkafka's error alone."""
    settings = settings_for(kafka, tmp_path, max_wait_ms=4000)
    sink = KafkaOutputSink(settings)
    sink.write(OutputBatch(0, alerts=[alert("warm-up")]))
    kafka.pause(kafka.broker_ids[0])
    try:
        writing = InThread(lambda: sink.write(OutputBatch(1, alerts=[alert("late")]))).join(60)
    finally:
        kafka.resume(kafka.broker_ids[0])
    assert isinstance(writing.error, TimeoutError), f"expected the bounded wait to end it: {writing.error!r}"
    assert "brokerUnavailable.maxWaitMs=4000" in str(writing.error) and "alert records" in str(writing.error)
    sink.close()   # the record waits in the queue: Kafka is back, it goes


def history(settings) -> list[dict]:
    """firing a; b fired and resolved; c fired; d fired, resolved, and a late firing copy (a
    replayed batch) after the resolution: spread over three partitions by fingerprint."""
    now = int(time.time() * 1000)
    return [alert("a", at=now - 5000), alert("b", at=now - 5000), alert("c", at=now - 4000),
            alert("d", at=now - 4000), alert("b", "resolved", at=now - 3000), alert("d", "resolved", at=now - 2000),
            alert("d", at=now - 4000)]


def write_history(settings) -> None:
    from udfs.kafka_sink import EventProducer

    producer = EventProducer(settings.kafka.bootstrap_servers, encoding="avro")
    producer.send(history(settings), settings.kafka.alerts_topic)
    producer.flush()


def test_the_history_read_waits_out_a_paused_broker_and_seeds_exactly_what_still_fires(kafka, tmp_path, caplog):
    """Why: at start-up the history read asked for metadata with a 30 s deadline and consumed for
    at most 60 s, then seeded Alertmanager from whatever it had: a broker away for longer failed
    the start, or left resolutions unread so that resolved incidents were re-sent as firing. It
    now waits as the source does, reads each partition to its end offset, and the seed is exact."""
    caplog.set_level(logging.WARNING)
    settings = settings_for(kafka, tmp_path)
    write_history(settings)
    kafka.pause(kafka.broker_ids[0])
    try:
        reading = InThread(lambda: read_alert_history(settings))
        wait_until(lambda: "Kafka unreachable" in caplog.text or not reading.thread.is_alive(), timeout_s=60,
                   what="the history read to say it waits for Kafka")
        assert reading.thread.is_alive() and reading.error is None, f"gave up: {reading.error!r}"
    finally:
        kafka.resume(kafka.broker_ids[0])
    latest = reading.join(120).result
    assert reading.error is None
    assert {fp: r["status"] for fp, r in latest.items()} == {"a": "firing", "b": "resolved", "c": "firing",
                                                             "d": "resolved"}
    book = AlertBook()
    book.seed(latest.values(), int(time.time() * 1000))
    assert book.active_fingerprints() == {"a", "c"}, "Alertmanager is seeded with exactly what still fires"


def test_the_history_read_gives_up_after_max_wait_naming_the_setting(kafka, tmp_path):
    """Why: a start-up that cannot read the history must not hang unbounded when the operator set a
    bound, and must say which setting bounds it."""
    settings = settings_for(kafka, tmp_path, max_wait_ms=4000)
    write_history(settings)
    kafka.pause(kafka.broker_ids[0])
    try:
        reading = InThread(lambda: read_alert_history(settings)).join(60)
    finally:
        kafka.resume(kafka.broker_ids[0])
    assert isinstance(reading.error, TimeoutError), f"expected the bounded wait to end it: {reading.error!r}"
    assert "brokerUnavailable.maxWaitMs=4000" in str(reading.error) and "alert history" in str(reading.error)
