"""The demo (README command 1): the embedded broker, a scripted incident played into Kafka with a
few malformed records, the real Spark job printing alerts as they fire, then the alerts read back
from Kafka and checked against the scenario's ground truth. Nothing is faked."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
import zlib
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from streaming import config
from streaming.tools.simulate import GroundTruth, check, run_scenario

EVENT_PARTITIONS = 8
GARBAGE = [b"not avro at all", b"\x00\x00\x00\x03\x07", b"\x00\x00\x00\x00\x63" + b"\x02" * 12]


def scenario_cluster(name: str) -> str:
    return f"sim-{name.replace('_', '-')}"


def play_scenarios(names: list[str], seed: int) -> tuple[list[dict], dict[str, GroundTruth]]:
    """Events of several scenarios as one stream: each scenario is its own cluster id, so one
    job run checks them all (the ground truth is per cluster)."""
    events, truths = [], {}
    for name in names:
        result = run_scenario(name, seed=seed)
        cluster = scenario_cluster(name)
        original = {ev["cluster_id"] for ev in result.events}
        for ev in result.events:
            events.append({**ev, "cluster_id": cluster})
        truths[cluster] = _retarget(result.truth, original, cluster)
    events.sort(key=lambda e: e["event_time"])
    return events, truths


def _retarget(truth: GroundTruth, original: set[str], cluster: str) -> GroundTruth:
    def fix(labels):
        return {k: (cluster if k == "cluster" and v in original else v) for k, v in labels.items()}

    return dataclasses.replace(
        truth, cluster_id=cluster,
        expected=[dataclasses.replace(e, labels=fix(e.labels)) for e in truth.expected],
        allowed=[dataclasses.replace(a, labels=fix(a.labels)) for a in truth.allowed])


def check_per_cluster(alerts: list[dict], truths: dict[str, GroundTruth]):
    """Each scenario's alerts up to the end of its script, checked against its truth."""
    reports = {}
    for cluster, truth in truths.items():
        mine = [a for a in alerts if a["cluster_id"] == cluster and a["event_time"] <= truth.end_ms]
        reports[cluster] = check(mine, truth)
    return reports


def load_events(writer, events: list[dict], partitions: int) -> None:
    """Bulk-produce, then produce each partition's last event alone, flushed.

    A real Kafka reports a partition's end offset exactly. tansu (the embedded broker) reports
    the start of the partition's last stored batch + 1, so after one bulk batch the source would
    see one record. Ending every partition with a batch of one makes tansu's answer right too.
    librdkafka's default partitioner is crc32(key) % partitions, as computed here.
    """
    from streaming.tools.simulate.writers import event_key

    last: dict[int, int] = {}
    for i, ev in enumerate(events):
        last[zlib.crc32(event_key(ev).encode()) % partitions] = i
    held = set(last.values())
    writer.write(ev for i, ev in enumerate(events) if i not in held)
    for i in sorted(held):
        writer.write([events[i]])


def read_topic(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0,
               keep=lambda message: message) -> list:
    """Every record of a topic from the beginning, until ``expected`` arrived (or the deadline);
    ``keep`` says what of each record to keep (the record itself by default)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"epochwatch-demo-{time.time_ns()}",
                         "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in meta.partitions])
        records, deadline = [], time.monotonic() + timeout_s
        while len(records) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is None:
                    records.append(keep(msg))
        return records
    finally:
        consumer.close()


def describe(names: list[str], events: list[dict], truths: dict[str, GroundTruth], out: IO[str]) -> None:
    span = (events[-1]["event_time"] - events[0]["event_time"]) / 1000 if events else 0
    out.write(f"playing {len(names)} scripted incident(s): {len(events):,} events over {span:.0f} s of event time\n")
    for cluster, truth in truths.items():
        when = ("no incident" if truth.incident_at_ms is None
                else f"incident at +{(truth.incident_at_ms - truth.start_ms) / 1000:.0f} s")
        out.write(f"  {truth.scenario} (cluster {cluster}), {when}\n")
        for e in truth.expected:
            labels = ",".join(f"{k}={v}" for k, v in sorted(e.labels.items()) if k != "cluster")
            out.write(f"    expects {e.alertname}{{{labels}}} within "
                      f"+{(e.not_after_ms - truth.incident_at_ms) / 1000:.0f} s: {e.why}\n")
    out.flush()


def run_demo(names: list[str], seed: int, bootstrap: str | None, report: Path | None,
             out: IO[str] = sys.stdout, batch_events: int = 400) -> int:
    from streaming.sinks.base import Dispatcher
    from streaming.sinks.console import ConsoleSink
    from streaming.sinks.jsonl import JsonLinesSink
    from streaming.sinks.kafka import KafkaOutputSink
    from streaming.sinks.memory import MemorySink
    from streaming.spark.job import start
    from streaming.spark.pipeline import EVENT_TIME
    from streaming.spark.session import build_session
    from streaming.tools.embedded import EmbeddedBroker, create_topics
    from streaming.tools.simulate.writers import KafkaEventWriter

    events, truths = play_scenarios(names, seed)
    rules = next(iter(truths.values())).rule_settings()
    work = Path(tempfile.mkdtemp(prefix="epochwatch-demo-"))
    broker = None if bootstrap else EmbeddedBroker().start()
    spark = None
    bootstrap = bootstrap or broker.bootstrap_servers
    spark_output = ExitStack()
    try:
        settings = config.load(overrides={"kafka.bootstrap.servers": bootstrap,
                                          "kafka.startingOffsets": "earliest",
                                          "kafka.maxOffsetsPerTrigger": batch_events})
        settings = dataclasses.replace(settings, rules=rules, checkpoint_location=str(work / "checkpoint"))
        k = settings.kafka
        create_topics(bootstrap, {k.events_topic: EVENT_PARTITIONS, k.alerts_topic: 4, k.dlq_topic: 1})
        out.write(f"embedded Kafka (tansu) on {bootstrap}; topics {k.events_topic}, {k.alerts_topic}, {k.dlq_topic}\n")
        describe(names, events, truths, out)
        _produce_garbage(bootstrap, k.events_topic)
        with KafkaEventWriter(bootstrap, k.events_topic, progress=None) as writer:
            load_events(writer, events, EVENT_PARTITIONS)
        out.write(f"produced {len(events):,} events and {len(GARBAGE)} malformed records; starting the Spark job\n\n")
        out.flush()

        spark_log = work / "spark.log"
        out.write(f"Spark's own output (JVM and Python workers): {spark_log}\n\n")
        out.flush()
        spark_output.enter_context(_stderr_to(spark_log))
        spark = build_session("epochwatch-demo", conf=settings.spark)
        memory = MemorySink()
        alerts_file, transitions_file = work / "alerts.jsonl", work / "transitions.jsonl"
        with open(alerts_file, "w") as a, open(transitions_file, "w") as t:
            sinks = Dispatcher([KafkaOutputSink(settings), ConsoleSink(out), memory, JsonLinesSink(a, t)])
            try:
                query = start(spark, settings, sinks.sinks, time_mode=EVENT_TIME, available_now=True,
                              query_name="epochwatch-demo")
                query.awaitTermination()
            finally:
                sinks.close()  # the alert producer goes before the broker does: no reconnect noise
        if query.exception():
            out.write(f"the query failed: {query.exception()}\n(Spark's log: {spark_log})\n")
            return 1
        alerts = memory.all("alerts")
        dead = memory.all("dead_letters")
        in_kafka = read_topic(bootstrap, k.alerts_topic, len(alerts))
        in_dlq = read_topic(bootstrap, k.dlq_topic, len(dead))
        out.write(f"\n{len(alerts)} alert records: {len(in_kafka)} read back from topic {k.alerts_topic}; "
                  f"{len(in_dlq)} malformed records in {k.dlq_topic}\n")
        ok = len(in_kafka) == len(alerts) and len(in_dlq) == len(GARBAGE)
        if len(truths) > 1:
            out.write("(each scenario is judged up to the end of its own script: a cluster whose script ends "
                      "first then looks silent to the monitor, which is not part of its incident)\n")
        for cluster, rep in check_per_cluster(alerts, truths).items():
            out.write(rep.summary() + "\n")
            ok = ok and rep.ok
        if report:
            from streaming.tools.report import build_report

            build_report(alerts_file, transitions_file, report, report.with_suffix(".html"))
            out.write(f"report: {report} and {report.with_suffix('.html')}\n")
        out.write("DEMO OK: every expected alert fired in time, nothing unexpected\n" if ok else "DEMO FAILED\n")
        return 0 if ok else 1
    finally:
        if spark is not None:
            spark.stop()  # its Python workers' Kafka clients too
        spark_output.close()
        if broker:
            broker.stop()


@contextmanager
def _stderr_to(path: Path):
    """File descriptor 2 goes to ``path`` until the end: the JVM that Spark starts inherits it, and
    so do its Python workers, whose start-up lines, log4j lines and worker prints would otherwise
    bury the demo's alerts (which go to stdout). The file keeps them for when something fails."""
    sys.stderr.flush()
    terminal = os.dup(2)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)
        os.close(terminal)


def _produce_garbage(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap})
    for i, value in enumerate(GARBAGE):
        producer.produce(topic, value, f"garbage-{i}")
    if producer.flush(30):
        raise RuntimeError("malformed demo records were not acknowledged")
