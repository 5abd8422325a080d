"""Alertmanager down under load: the live job (processing time) with the production sinks
(`epochwatch run`'s build_sinks: alerts topic, metrics, AlertmanagerSink) keeps completing batches
at a few hundred events/s while Alertmanager is stopped and incidents start and end; the backlog
shows on epochwatch_alertmanager_backlog; once Alertmanager is back on its port the backlog drains
to 0 and Alertmanager holds every alert in its final state (firing ones active, resolved ones not)."""

from __future__ import annotations

import time

import pytest
import requests

from streaming.commands.run import build_sinks
from streaming.sinks.alert_book import BookSettings, alertmanager_payload, latest_alert_states
from streaming.sinks.base import Dispatcher
from streaming.sinks.labels import presented
from streaming.sinks.memory import MemorySink
from streaming.sinks.metrics import input_records
from streaming.spark.job import start
from streaming.spark.listeners import ProgressListener
from streaming.spark.pipeline import PROCESSING_TIME
from streaming.tools.embedded import create_topics
from tests.integration.faults.support import LiveTelemetry, firing, job_topics, live_settings, progresses
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BROKERS = [1, 2, 3, 4, 5, 6]
CLIENTS = 60            # 6 brokers x 4 + 60 clients x 4 metadata responses per second: ~260 events/s
FIRST_BATCH_S = 120


def delivery_sample(metrics, name: str) -> float:
    """The one Alertmanager's series (label alertmanager: its URL)."""
    return sum(s.value for family in metrics.registry.collect() for s in family.samples if s.name == name)


def backlog(metrics) -> float:
    return delivery_sample(metrics, "epochwatch_alertmanager_backlog")


def active_in_alertmanager(url: str) -> set[frozenset]:
    body = requests.get(f"{url}/api/v2/alerts", timeout=5).json()
    return {frozenset(a["labels"].items()) for a in body if a["labels"].get("kafka_cluster") == "am-outage"}


def labels_of(record: dict) -> frozenset:
    """The labels Alertmanager holds for a record the rules emitted (default sinks.labels)."""
    return frozenset(alertmanager_payload(presented(record), 0, BookSettings())["labels"].items())


def test_alertmanager_outage_under_load_backlog_drains_and_final_states_match(
        broker, spark, alertmanager_on_fixed_port, tmp_path, fault_report):
    am = alertmanager_on_fixed_port
    settings = live_settings(broker.bootstrap_servers, tmp_path, **{"sinks.alertmanager.url": am.url})
    create_topics(broker.bootstrap_servers, job_topics(settings))
    telemetry = LiveTelemetry(broker.bootstrap_servers, settings.kafka.events_topic, "am-outage", BROKERS,
                              clients=CLIENTS).start()
    sinks, metrics, _board = build_sinks(settings, console=False)      # exactly what `epochwatch run` wires
    memory = MemorySink()
    listener = ProgressListener(metrics, emit=lambda line: None)
    spark.streams.addListener(listener)
    query = start(spark, settings, [*sinks, memory], time_mode=PROCESSING_TIME,
                  query_name=f"faults-am-{tmp_path.name[-10:]}")
    try:
        def alive():
            if not query.isActive:
                raise AssertionError(f"the query stopped: {query.exception()}")
            return True

        wait_until(lambda: alive() and query.lastProgress is not None and memory.all("broker_status"),
                   timeout_s=FIRST_BATCH_S, what="the first batch")
        telemetry.silence(6)
        six = wait_until(lambda: alive() and firing(memory, "BrokerHeartbeatTimeout", 6), timeout_s=60,
                         what="broker 6's timeout")[0]
        wait_until(lambda: labels_of(six) in active_in_alertmanager(am.url), timeout_s=30,
                   what="broker 6's timeout in Alertmanager")

        am.stop()
        outage_started, first_batch_in_outage = time.monotonic(), query.lastProgress["batchId"] + 1
        produced_before = telemetry.produced
        telemetry.silence(4)
        telemetry.silence(5)
        telemetry.resume(6)
        wait_until(lambda: alive() and firing(memory, "BrokerHeartbeatTimeout", 5), timeout_s=60,
                   what="broker 5's timeout during the outage")
        telemetry.resume(5)
        wait_until(lambda: alive() and firing(memory, "BrokerHeartbeatTimeout", 4)
                   and firing(memory, "BrokerHeartbeatTimeout", 5, status="resolved")
                   and firing(memory, "BrokerHeartbeatTimeout", 6, status="resolved"), timeout_s=60,
                   what="broker 4 firing, brokers 5 and 6 resolved, during the outage")
        wait_until(lambda: backlog(metrics) > 0, timeout_s=10, what="a backlog on epochwatch_alertmanager_backlog")
        peak_backlog = backlog(metrics)
        in_outage = [p for p in progresses(query) if p["batchId"] >= first_batch_in_outage]
        outage_s = time.monotonic() - outage_started
        produced_in_outage = telemetry.produced - produced_before
        assert len(in_outage) >= 3, f"only {len(in_outage)} batches completed in {outage_s:.0f} s of outage"
        lag = metrics.registry.get_sample_value("epochwatch_source_lag_records")
        read = sum(input_records(p)[0] for p in in_outage)
        assert lag <= 10 * produced_in_outage / outage_s, f"the job fell behind: {lag:.0f} records of lag"

        am.start()
        restarted = time.monotonic()
        wait_until(lambda: alive() and backlog(metrics) == 0, timeout_s=90, what="the backlog to drain")
        drained_s = time.monotonic() - restarted
        final = latest_alert_states(memory.all("pages"))   # what goes to Alertmanager: client alerts rolled up
        want = {labels_of(r) for r in final.values() if r["status"] == "firing"}
        got = wait_until(lambda: active_in_alertmanager(am.url) == want and want, timeout_s=30,
                         what=f"Alertmanager to hold exactly the firing alerts {want}")
        assert any(dict(s).get("broker_id") == "4" for s in got)
        assert not any(dict(s).get("broker_id") in ("5", "6") and dict(s)["alertname"] == "BrokerHeartbeatTimeout"
                       for s in got)
        failures = delivery_sample(metrics, "epochwatch_alertmanager_delivery_failures_total")
        fault_report(f"Alertmanager down {outage_s:.0f} s, {produced_in_outage / outage_s:.0f} events/s produced, "
                     f"{read / outage_s:.0f}/s read: "
                     f"{len(in_outage)} batches completed, source lag {lag:.0f} records, backlog peak "
                     f"{peak_backlog:.0f}, {failures:.0f} failed deliveries; backlog drained {drained_s:.1f} s after "
                     f"the restart; {len(final)} incidents, {len(want)} firing at the end, all in Alertmanager")
    finally:
        telemetry.stop(flush_timeout_s=5)
        query.stop()
        spark.streams.removeListener(listener)
        Dispatcher(sinks).close()
