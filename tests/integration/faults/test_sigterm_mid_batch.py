"""SIGTERM while the live job is inside a micro-batch (a steady 10,000 events/s keeps it busy):
`epochwatch run` lets the batch reach its sinks, then stops the query. Stopped inside the batch,
the foreachBatch call was interrupted and Spark 4.3 logged a Py4J traceback followed by a
java.lang.StackOverflowError, which on-call would read as a crash at every restart."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from streaming.tools.simulate import ClusterShape, steady_state
from streaming.tools.simulate.writers import KafkaEventWriter
from tests.integration.faults.support import job_on_fresh_topics
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

JOB_START_S = 180   # JVM + SparkSession + first batch on two busy cores
RATE = 10_000       # events/s: batches take longer than the trigger interval, one follows another


def test_sigterm_in_a_busy_job_stops_after_the_batch_without_an_interruption_trace(broker, job_factory, tmp_path,
                                                                                     fault_report):
    bootstrap = broker.bootstrap_servers
    config, topics = job_on_fresh_topics(bootstrap, tmp_path, "term", partitions=(8, 2, 1))
    stop_producing = threading.Event()
    producer = threading.Thread(target=_produce, args=(bootstrap, topics["events"], stop_producing), daemon=True)
    producer.start()
    try:
        job = job_factory(config, "--set", "trigger_interval=500 milliseconds").start()  # live: processing time
        first = job.wait_for_batch(JOB_START_S, "the job's first batch")
        wait_until(lambda: len(job.progress()) >= len(first) + 3, timeout_s=120, interval_s=0.2,
                   what="three more batches at the full rate")
        asked = time.monotonic()
        code = job.stop(timeout_s=60)
        stop_s = time.monotonic() - asked
    finally:
        stop_producing.set()
        producer.join(timeout=30)
    log = job.log(True)
    assert code == 0, log[-3000:]
    for trace in ("StackOverflowError", "Py4JJavaError", "Exception in thread"):
        assert trace not in log, f"{trace} in the job's log after SIGTERM:\n{log[-3000:]}"
    assert stop_s < 30, f"SIGTERM took {stop_s:.1f} s"
    fault_report(f"epochwatch run at {RATE:,} events/s: SIGTERM ended the job in {stop_s:.1f} s (exit 0), "
                 f"after {len(job.batches())} batches, no interruption trace in its log")


def _produce(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """RATE events/s of a 200-broker / 20,000-client fleet, stamped with the wall clock."""
    writer = KafkaEventWriter(bootstrap, topic, progress=None)
    fleet = steady_state(shape=ClusterShape(cluster_id="term", brokers=200, clients=20_000, groups=200),
                         duration_ms=24 * 3600 * 1000)
    started, sent = time.monotonic(), 0
    try:
        while not stop.is_set():
            due = int((time.monotonic() - started) * RATE) - sent
            now_ms = int(time.time() * 1000)
            batch = [dict(event, event_time=now_ms) for event in itertools.islice(fleet, max(0, due))]
            if batch:
                writer.write(batch)
                sent += len(batch)
            stop.wait(0.05)
    finally:
        writer.close()
