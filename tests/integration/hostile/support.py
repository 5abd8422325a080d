"""Helpers of the hostile-input tests: the job in this process over fresh topics, event time,
``availableNow`` (it stops by itself once it has read everything), and the records of a topic
read back with their headers."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from streaming import config
from streaming.tools.embedded import create_topics


def job_settings(bootstrap: str, tmp_path: Path, **overrides) -> config.Settings:
    suffix = tmp_path.name[-10:]
    settings = config.load(overrides={
        "kafka.bootstrap.servers": bootstrap, "kafka.startingOffsets": "earliest",
        "kafka.topics.events": f"hostile-ev-{suffix}", "kafka.topics.alerts": f"hostile-al-{suffix}",
        "kafka.topics.dlq": f"hostile-dlq-{suffix}", **overrides})
    settings = dataclasses.replace(settings, checkpoint_location=str(tmp_path / "checkpoint"))
    k = settings.kafka
    create_topics(bootstrap, {k.events_topic: 1, k.alerts_topic: 1, k.dlq_topic: 1})
    return settings


def run_to_end(spark, settings: config.Settings, sinks: list, timeout_s: float = 300.0):
    """The job over what the events topic holds now, on event time; returns the finished query."""
    from streaming.sinks.kafka import KafkaOutputSink
    from streaming.spark.job import start
    from streaming.spark.pipeline import EVENT_TIME

    kafka_sink = KafkaOutputSink(settings)
    query = start(spark, settings, [kafka_sink, *sinks], time_mode=EVENT_TIME, available_now=True,
                  query_name=f"hostile-{Path(settings.checkpoint_location).parent.name[-10:]}")
    try:
        query.awaitTermination(timeout_s)
    finally:
        if query.isActive:
            query.stop()
        kafka_sink.close()
    return query


def write_events(bootstrap: str, topic: str, events: list[dict], **client) -> None:
    """Events in the Confluent wire format, acknowledged before returning."""
    from streaming.tools.simulate.writers import KafkaEventWriter

    with KafkaEventWriter(bootstrap, topic, progress=None, client=client or None) as writer:
        writer.write(events)


def produce_raw(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]], **client) -> None:
    """(key, value) records as they are, acknowledged before returning."""
    from confluent_kafka import Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **client})
    for key, value in records:
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=lambda err, _m: err and errors.append(str(err)))
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0 and not errors, errors[:3]


def dead_letter_headers(bootstrap: str, topic: str, expected: int, timeout_s: float = 120.0) -> list[dict]:
    """The headers of a topic's records (as text) until ``expected`` arrived or the deadline; the
    values are let go as they come (they may add up to gigabytes)."""
    from streaming.tools.demo import read_topic
    from udfs.dead_letters import headers_to_dict

    return read_topic(bootstrap, topic, expected, timeout_s, keep=lambda m: headers_to_dict(m.headers()))


def exit_code(job, timeout_s: float) -> int:
    """The exit code of a JobProcess once it ended by itself (``--available-now``)."""
    from tests.support.polling import wait_until

    wait_until(lambda: job.returncode() is not None, timeout_s=timeout_s, interval_s=0.5,
               what=f"the job to finish; its log ends:\n{job.log()[-2000:]}")
    return job.returncode()


def run_to_exit(config, log_path, timeout_s: float = 300):
    """`epochwatch run --event-time --available-now` as a process, to its own end: (exit code, job)."""
    from tests.integration.faults.support import JobProcess

    job = JobProcess(config, log_path, ("--event-time", "--available-now")).start()
    try:
        return exit_code(job, timeout_s), job
    finally:
        job.stop(timeout_s=20)
