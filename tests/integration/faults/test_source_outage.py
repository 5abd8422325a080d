"""The Kafka source while its broker is unreachable (the broker's JVM SIGSTOPped: connections
stay open, nothing answers) for longer than one request's deadline: planning (driver) and reading
(executor) wait and then continue, or fail naming brokerUnavailable.maxWaitMs once it is
exceeded; the live query rides the outage out without loss or duplicate, and stops at once when
asked to while the broker is down. Short per-request deadlines keep the outages short."""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable

from streaming.tools.embedded import create_topics
from streaming.tools.simulate.writers import event_key
from tests.integration.faults.support import OWN_BROKER, LiveTelemetry, job_on_fresh_topics, live_settings
from tests.support.builders import hb
from tests.support.polling import wait_until
from udfs import avro_codec
from udfs.broker_offsets import BrokerOffsets
from udfs.kafka_options import parse_source_options
from udfs.kafka_retry import BrokerUnavailableError
from udfs.kafka_source import KafkaStreamReader
from udfs.offsets import parse_source_offset
from udfs.partition_reader import FetchTimeoutError

pytestmark = [pytest.mark.integration]

REQUEST_TIMEOUT_MS = 1000   # fetchOffset.timeoutMs and kafkaConsumer.pollTimeoutMs in these tests
OUTAGE_S = 5                # five request deadlines


@contextlib.contextmanager
def unreachable(cluster):
    """The cluster's broker is stopped (SIGSTOP) inside the block, and always continued after it."""
    cluster.pause(OWN_BROKER)
    try:
        yield time.monotonic()
    finally:
        cluster.resume(OWN_BROKER)


def in_background(call) -> Future:
    pool = ThreadPoolExecutor(1)
    future = pool.submit(call)
    pool.shutdown(wait=False)
    return future


def still_waiting_after(future: Future, since: float, seconds: float) -> None:
    """Poll until ``seconds`` have passed since ``since``; the call must not finish meanwhile."""
    wait_until(lambda: future.done() or time.monotonic() - since >= seconds, timeout_s=seconds + 10,
               interval_s=0.1, what="the outage")
    if future.done():
        raise AssertionError(f"returned during the outage: {future.exception() or future.result()}")


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    """Records round-robin over the partitions, acknowledged before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"value %d" % i, b"key", partition=i % partitions)
    assert producer.flush(10) == 0


def reader(bootstrap: str, topic: str, **options) -> KafkaStreamReader:
    return KafkaStreamReader(parse_source_options({
        "kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
        "fetchOffset.timeoutMs": str(REQUEST_TIMEOUT_MS), "fetchOffset.retryIntervalMs": "50",
        "kafkaConsumer.pollTimeoutMs": str(REQUEST_TIMEOUT_MS), **options}))


def test_planning_waits_out_an_outage_longer_than_the_request_deadline(own_broker, caplog, fault_report):
    bootstrap = own_broker.bootstrap_servers
    create_topics(bootstrap, {"events": 2})
    produce(bootstrap, "events", 40, partitions=2)
    source = reader(bootstrap, "events")
    start = source.initialOffset()

    with caplog.at_level(logging.WARNING, logger="epochwatch.kafka_source"), unreachable(own_broker) as paused:
        planned = in_background(lambda: source.latestOffset(start, ReadAllAvailable()))
        still_waiting_after(planned, paused, OUTAGE_S)
    resumed = time.monotonic()
    end = planned.result(timeout=30)
    answered_s = time.monotonic() - resumed
    source.stop()

    assert parse_source_offset(end)[0] == {("events", 0): 20, ("events", 1): 20}
    lines = [r.getMessage() for r in caplog.records]
    warned = [line for line in lines if "unreachable for" in line]
    assert warned and "waiting forever" in warned[0], lines
    assert len(warned) <= 1 + OUTAGE_S // 30, "at most one warning per 30 s"
    assert any("reachable again" in line for line in lines), lines
    fault_report(f"latestOffset blocked through a {OUTAGE_S} s outage (request deadline {REQUEST_TIMEOUT_MS} ms), "
                 f"answered {answered_s:.2f} s after SIGCONT; log: {warned[0]}")


FENCED_S = 12   # longer than the broker's session (broker.session.timeout.ms, 9 s): it is fenced


def test_offsets_are_answered_again_after_the_broker_was_fenced(own_broker, fault_report):
    """Why: paused past its session, the broker is fenced, and when it is back its partitions have
    a new leader epoch. librdkafka's AdminClient kept the old epoch, so a ListOffsets retried
    through the pause got FENCED_LEADER_EPOCH on every attempt and the query planned nothing, for
    good (seen on Kafka 4.1.2; any leader election in a bigger cluster does the same)."""
    bootstrap = own_broker.bootstrap_servers
    create_topics(bootstrap, {"events": 1})
    produce(bootstrap, "events", 10, partitions=1)
    broker_offsets = BrokerOffsets(parse_source_options({
        "kafka.bootstrap.servers": bootstrap, "subscribe": "events", "fetchOffset.timeoutMs": str(REQUEST_TIMEOUT_MS),
        "fetchOffset.retryIntervalMs": "50", "brokerUnavailable.maxWaitMs": "90000"}))
    assert broker_offsets.latest([("events", 0)]) == {("events", 0): 10}

    with unreachable(own_broker) as paused:
        asked = in_background(lambda: broker_offsets.latest([("events", 0)]))
        still_waiting_after(asked, paused, FENCED_S)
    resumed = time.monotonic()
    answer = asked.result(timeout=60)
    answered_s = time.monotonic() - resumed
    broker_offsets.close()
    assert answer == {("events", 0): 10}
    fault_report(f"latest offsets asked through a {FENCED_S} s pause (the broker fenced, a new leader epoch "
                 f"after it): answered {answered_s:.2f} s after SIGCONT")


def test_planning_gives_up_after_the_max_wait_naming_the_option(own_broker):
    bootstrap = own_broker.bootstrap_servers
    create_topics(bootstrap, {"events": 1})
    source = reader(bootstrap, "events", **{"brokerUnavailable.maxWaitMs": "2500"})
    start = source.initialOffset()
    with unreachable(own_broker) as paused:
        with pytest.raises(BrokerUnavailableError) as failure:
            source.latestOffset(start, ReadAllAvailable())
        failed_after_s = time.monotonic() - paused
    source.stop()
    assert "brokerUnavailable.maxWaitMs=2500" in str(failure.value) and "Fix:" in str(failure.value)
    assert 2.5 <= failed_after_s < 6, failed_after_s


def test_a_read_waits_out_an_outage_longer_than_the_poll_deadline(own_broker, fault_report):
    bootstrap = own_broker.bootstrap_servers
    create_topics(bootstrap, {"events": 1})
    produce(bootstrap, "events", 500, partitions=1)
    source = reader(bootstrap, "events")
    [partition] = source.partitions({"events": {"0": 0}}, {"events": {"0": 500}})

    with unreachable(own_broker) as paused:
        read = in_background(lambda: [o for b in source.read(partition) for o in b.column("offset").to_pylist()])
        still_waiting_after(read, paused, OUTAGE_S)
    resumed = time.monotonic()
    offsets = read.result(timeout=60)
    fault_report(f"a range read waited through a {OUTAGE_S} s outage (kafkaConsumer.pollTimeoutMs="
                 f"{REQUEST_TIMEOUT_MS}) and finished {time.monotonic() - resumed:.2f} s after SIGCONT")
    assert offsets == list(range(500)), "every record once, in order"


def test_a_read_gives_up_after_the_max_wait_naming_the_option(own_broker):
    bootstrap = own_broker.bootstrap_servers
    create_topics(bootstrap, {"events": 1})
    produce(bootstrap, "events", 10, partitions=1)
    source = reader(bootstrap, "events", **{"brokerUnavailable.maxWaitMs": "2500"})
    [partition] = source.partitions({"events": {"0": 0}}, {"events": {"0": 10}})
    with unreachable(own_broker) as paused:
        with pytest.raises(FetchTimeoutError) as failure:
            list(source.read(partition))
        failed_after_s = time.monotonic() - paused
    assert "brokerUnavailable.maxWaitMs=2500" in str(failure.value) and "events-0" in str(failure.value)
    assert 2.5 <= failed_after_s < 8, failed_after_s


# --- the live query ---------------------------------------------------------------------------

LIVE_OUTAGE_S = 10
FIRST_BATCH_S = 120


class Coordinates:
    """foreachBatch target: every (topic, partition, offset) the query delivered, duplicates kept."""

    def __init__(self):
        self.seen: list[tuple[str, int, int]] = []

    def __call__(self, batch, _batch_id) -> None:
        self.seen.extend((r[0], r[1], r[2]) for r in batch.collect())


@pytest.mark.spark
def test_live_query_rides_out_an_outage_then_stops_at_once_during_another(own_broker, spark, tmp_path, fault_report):
    from streaming.spark.kafka_input import kafka_events

    settings = live_settings(own_broker.bootstrap_servers, tmp_path, **{
        "kafka.fetchOffset.timeoutMs": REQUEST_TIMEOUT_MS, "kafka.kafkaConsumer.pollTimeoutMs": REQUEST_TIMEOUT_MS,
        "kafka.fetchOffset.retryIntervalMs": 50})
    topic = settings.kafka.events_topic
    create_topics(own_broker.bootstrap_servers, {topic: 2})
    telemetry = LiveTelemetry(own_broker.bootstrap_servers, topic, "outage-cluster", [1, 2, 3]).start()
    delivered = Coordinates()
    query = (kafka_events(spark, settings).select("kafka_topic", "kafka_partition", "kafka_offset").writeStream
             .foreachBatch(delivered).option("checkpointLocation", settings.checkpoint_location)
             .trigger(processingTime="500 milliseconds").queryName(f"outage-{tmp_path.name[-10:]}").start())
    try:
        wait_until(lambda: _alive(query) and delivered.seen, timeout_s=FIRST_BATCH_S, what="a first batch with rows")
        # Between two batches, so that the outage meets the planner: paused while a batch runs,
        # the executors' reads wait it out instead ("Processing new data"), also without a batch
        # planned on no data, but not what this test is about.
        wait_until(lambda: _alive(query) and query.status["message"] == "Waiting for next trigger", timeout_s=30,
                   interval_s=0.01, what="the query between two batches")

        with unreachable(own_broker) as paused:
            before = _batch_id(query)
            wait_until(lambda: not _alive(query) or time.monotonic() - paused >= LIVE_OUTAGE_S,
                       timeout_s=LIVE_OUTAGE_S + 10, interval_s=0.2, what="the outage")
            during = _batch_id(query) - before
            status = query.status["message"]
        resumed = time.monotonic()
        assert during <= 1, f"{during} batches completed while nothing answered: planned on no data"
        assert status.startswith("Getting offsets"), f"the query should be waiting for offsets, not: {status}"
        at_resume = len(delivered.seen)
        wait_until(lambda: _alive(query) and len(delivered.seen) > at_resume, timeout_s=60,
                   what="rows after the broker came back")
        recovered_s = time.monotonic() - resumed

        produced = telemetry.hold()
        wait_until(lambda: _alive(query) and len(delivered.seen) >= produced, timeout_s=60,
                   what=f"all {produced} records delivered")
        counts = Counter(delivered.seen)
        duplicates = {c: n for c, n in counts.items() if n > 1}
        assert not duplicates, f"delivered twice: {sorted(duplicates)[:10]}"
        for partition in (0, 1):
            offsets = sorted(o for t, p, o in counts if p == partition)
            assert offsets == list(range(len(offsets))), f"partition {partition} has gaps"
        assert len(counts) == produced, (len(counts), produced)

        with unreachable(own_broker) as paused:
            wait_until(lambda: _alive(query) and time.monotonic() - paused >= 3 * REQUEST_TIMEOUT_MS / 1000,
                       timeout_s=30, interval_s=0.2, what="the source waiting through three request deadlines")
            asked = time.monotonic()
            query.stop()
            stop_s = time.monotonic() - asked
        assert not query.isActive and query.exception() is None
        assert stop_s < 10, f"stop() took {stop_s:.1f} s while the broker was down"
        fault_report(f"live query, broker unreachable {LIVE_OUTAGE_S} s (request deadline {REQUEST_TIMEOUT_MS} ms): "
                     f"{during} batch(es) completed during the outage, rows again {recovered_s:.1f} s after SIGCONT, "
                     f"{produced} records delivered once each; stop() during a second outage took {stop_s:.2f} s")
    finally:
        telemetry.stop(flush_timeout_s=5)
        query.stop()


def _alive(query) -> bool:
    if not query.isActive:
        raise AssertionError(f"the query stopped: {query.exception()}")
    return True


def _batch_id(query) -> int:
    progress = query.lastProgress
    return -1 if progress is None else progress["batchId"]


# --- `epochwatch run` ---------------------------------------------------------------------------

JOB_START_S = 180   # JVM + SparkSession + first batch on two busy cores


@pytest.mark.spark
def test_run_logs_the_outage_and_stops_on_sigterm_while_the_broker_is_down(own_broker, job_factory, tmp_path,
                                                                            fault_report):
    """The config keys reach the source through streaming.spark.job; SIGTERM during an outage ends the job."""
    bootstrap = own_broker.bootstrap_servers
    config, topics = job_on_fresh_topics(bootstrap, tmp_path, "out", kafka={
        "fetchOffset.timeoutMs": REQUEST_TIMEOUT_MS, "kafkaConsumer.pollTimeoutMs": REQUEST_TIMEOUT_MS})
    producer = Producer({"bootstrap.servers": bootstrap})
    now_ms = int(time.time() * 1000)
    for i in range(10):
        event = {**hb(now_ms + i * 250, 1), "cluster_id": "outage-cluster"}
        producer.produce(topics["events"], avro_codec.encode(event), event_key(event))
    assert producer.flush(10) == 0
    job = job_factory(config).start()
    job.wait_for_batch(JOB_START_S, "the job's first batch")

    with unreachable(own_broker):
        warning = wait_until(lambda: job.alive() and next(
            (line for line in job.log(True).splitlines() if "Kafka unreachable for" in line), None),
            timeout_s=30, interval_s=0.2, what="the outage warning in the job's log")
        asked = time.monotonic()
        code = job.stop(timeout_s=60)
        stop_s = time.monotonic() - asked
    assert code == 0, job.log(True)[-3000:]
    assert stop_s < 30, f"SIGTERM took {stop_s:.1f} s to end the job while the broker was down"
    fault_report(f"epochwatch run: SIGTERM during an outage ended the job in {stop_s:.1f} s (exit 0); "
                 f"log: {warning.strip()[:200]}")
