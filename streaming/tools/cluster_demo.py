"""The demo on the real thing (README command 1): a real Apache Kafka KRaft cluster on loopback,
`epochwatch collect` watching it, the live Spark job, and one real incident — a broker cut off
from the controller while its clients still reach it. Alerts print as they fire; the run ends
with every expected alert fired and resolved, nothing else paging, the alert records read back
from Kafka, and the report drawn.

The monitor's own topics live on a separate one-broker Kafka, as they should in production: a
monitor whose input runs through the cluster it watches goes blind exactly when that cluster is
sick (a cut-off leader of an events partition accepts writes it cannot replicate).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import IO

from streaming import config

CUT_BROKER = 2
EXPECTED = ("BrokerHeartbeatTimeout", "BrokerMetadataLag", "StaleMetadataResponse")
# Kafka's own timers stay the defaults (session 9 s, heartbeat 2 s); epochwatch's graces are
# shortened so that the incident and its healing fit in a couple of minutes.
DEMO_RULES = {"rules.metadata.lag.grace.ms": 10000, "rules.stale.metadata.quiet.ms": 15000}
PAGING = ("warning", "critical")


def _wait(what: str, predicate, timeout_s: float, out: IO[str]):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.25)
    out.write(f"gave up after {timeout_s:.0f} s waiting for {what}\n")
    return None


def _alert(memory, name: str, status: str, since_ms: int, broker_id: int):
    return next((a for a in memory.all("alerts") if a["alertname"] == name and a["status"] == status
                 and a["event_time"] >= since_ms and a["labels"].get("broker_id") == str(broker_id)), None)


def run_cluster_demo(report: Path | None, out: IO[str] = sys.stdout) -> int:
    from streaming.collect.collector import Collector
    from streaming.collect.publish import EventPublisher
    from streaming.sinks.base import Dispatcher
    from streaming.sinks.console import ConsoleSink
    from streaming.sinks.jsonl import JsonLinesSink
    from streaming.sinks.kafka import KafkaOutputSink
    from streaming.sinks.memory import MemorySink
    from streaming.spark.job import start
    from streaming.spark.session import build_session
    from streaming.tools.demo import _stderr_to, read_topic
    from streaming.tools.embedded import create_topics
    from streaming.tools.kafka_cluster import KafkaCluster

    work = Path(tempfile.mkdtemp(prefix="epochwatch-demo-"))
    began = time.monotonic()
    with ExitStack() as stack:
        out.write("starting a real Apache Kafka 4.1 cluster on loopback (KRaft: 1 controller, 3 brokers, "
                  "each its own JVM with the Prometheus JMX exporter)...\n")
        out.flush()
        cluster = KafkaCluster(work / "cluster", controllers=1, brokers=3)
        stack.callback(cluster.stop)
        bus = KafkaCluster(work / "bus", controllers=1, brokers=1)
        stack.callback(bus.stop)
        cluster.start()
        bus.start()
        create_topics(cluster.bootstrap_servers, {"orders": 6}, replication_factor=3)
        out.write(f"  cluster {cluster.cluster_id} ready in {time.monotonic() - began:.0f} s: brokers "
                  f"{cluster.bootstrap_servers}; the monitor's topics on a separate one-broker Kafka ({bus.bootstrap_servers})\n")

        settings = config.load(overrides={
            "kafka.bootstrap.servers": bus.bootstrap_servers, "kafka.startingOffsets": "earliest",
            "collect.bootstrap.servers": cluster.bootstrap_servers,
            "collect.exporter.urls": ",".join(cluster.metrics_urls[n] for n in sorted(cluster.metrics_urls)),
            "sinks.metrics.port": 0, **DEMO_RULES})
        settings = dataclasses.replace(settings, checkpoint_location=str(work / "checkpoint"),
                                       trigger_interval="500 milliseconds")
        k = settings.kafka
        create_topics(bus.bootstrap_servers, {k.events_topic: 4, k.alerts_topic: 1, k.dlq_topic: 1})

        publisher = EventPublisher(bus.bootstrap_servers, k.events_topic)
        collector, stop_collecting = Collector(settings, publisher), threading.Event()
        collect_log = open(work / "collect.log", "w")
        stack.callback(collect_log.close)
        thread = threading.Thread(target=collector.run, kwargs={"stop": stop_collecting.is_set, "status": collect_log},
                                  name="epochwatch-collect", daemon=True)
        thread.start()
        stack.callback(lambda: (stop_collecting.set(), thread.join(30), collector.close(), publisher.close()))
        out.write(f"epochwatch collect: a round every {settings.collect.interval_ms} ms (status lines: "
                  f"{work / 'collect.log'})\n")

        spark_log = work / "spark.log"
        out.write(f"starting the Spark job\nSpark's own output (JVM and Python workers): {spark_log}\n\n")
        out.flush()
        stack.enter_context(_stderr_to(spark_log))
        spark = build_session("epochwatch-demo", conf=settings.spark)
        stack.callback(spark.stop)
        memory = MemorySink()
        alerts_file, transitions_file = work / "alerts.jsonl", work / "transitions.jsonl"
        a, t = open(alerts_file, "w", buffering=1), open(transitions_file, "w", buffering=1)
        stack.callback(a.close)
        stack.callback(t.close)
        sinks = Dispatcher([KafkaOutputSink(settings), ConsoleSink(out), memory, JsonLinesSink(a, t)])
        query = start(spark, settings, sinks, query_name="epochwatch-demo")

        stopped = []

        def stop_query():  # once, on the way out or before reading the alerts back
            if not stopped:
                stopped.append(True)
                query.stop()
                sinks.close()  # the alert producer delivers what it holds
        stack.callback(stop_query)

        if not _wait("the job's first batch of collected events",
                     lambda: query.exception() or (query.lastProgress or {}).get("numInputRows", 0) > 0, 240, out):
            return 1
        out.write(f"the job is reading the collector's events ({time.monotonic() - began:.0f} s since the start)\n")
        out.flush()
        steady = int(time.time() * 1000)
        _wait("ten seconds of a healthy cluster", lambda: time.time() * 1000 - steady > 10_000, 20, out)

        cut_ms = int(time.time() * 1000)
        out.write(f"\n*** cutting broker {CUT_BROKER} off from the controller; its clients still reach it ***\n\n")
        out.flush()
        cluster.cut_controller_link(CUT_BROKER)
        fired = {}
        for name in EXPECTED:
            alert = _wait(f"{name} firing", lambda n=name: _alert(memory, n, "firing", cut_ms, CUT_BROKER), 120, out)
            if alert is None:
                cluster.heal_controller_link(CUT_BROKER)
                return _failed(out, spark_log)
            fired[name] = time.time() * 1000 - cut_ms
        heal_ms = int(time.time() * 1000)
        out.write(f"\n*** healing broker {CUT_BROKER}'s controller link ***\n\n")
        out.flush()
        cluster.heal_controller_link(CUT_BROKER)
        for name in EXPECTED:
            if _wait(f"{name} resolved", lambda n=name: _alert(memory, n, "resolved", cut_ms, CUT_BROKER), 120,
                     out) is None:
                return _failed(out, spark_log)
        resolved_in = time.time() * 1000 - heal_ms
        stop_query()
        alerts = memory.all("alerts")
        in_kafka = read_topic(bus.bootstrap_servers, k.alerts_topic, len(alerts))
    # everything is stopped here: the query, Spark, the collector, the cluster and the bus
    return _summary(out, alerts, fired, resolved_in, len(in_kafka), cut_ms, report, alerts_file, transitions_file,
                    began)


def _summary(out, alerts, fired, resolved_in, in_kafka, cut_ms, report, alerts_file, transitions_file, began) -> int:
    for name, delay in fired.items():
        out.write(f"measured: {name} fired {delay / 1000:.1f} s after the cut\n")
    out.write(f"measured: all resolved {resolved_in / 1000:.1f} s after the link healed\n")
    unexpected = sorted({(x["alertname"], x["labels"].get("broker_id")) for x in alerts
                         if x["status"] == "firing" and x["severity"] in PAGING
                         and not (x["alertname"] in EXPECTED and x["labels"].get("broker_id") == str(CUT_BROKER))})
    ok = not unexpected and in_kafka == len(alerts)
    out.write(f"{len(alerts)} alert records: {in_kafka} read back from the alerts topic\n")
    if unexpected:
        out.write(f"unexpected pages: {unexpected}\n")
    if report:
        from streaming.tools.report import build_report

        build_report(alerts_file, transitions_file, report, report.with_suffix(".html"),
                     title=f"epochwatch demo: broker {CUT_BROKER} cut off from the controller, then healed")
        out.write(f"report: {report} and {report.with_suffix('.html')}\n")
    out.write(f"{time.monotonic() - began:.0f} s from the start\n")
    out.write("DEMO OK: a real broker cut off from the controller paged, healed and resolved; nothing else paged\n"
              if ok else "DEMO FAILED\n")
    return 0 if ok else 1


def _failed(out: IO[str], spark_log: Path) -> int:
    out.write(f"DEMO FAILED (Spark's log: {spark_log})\n")
    return 1
