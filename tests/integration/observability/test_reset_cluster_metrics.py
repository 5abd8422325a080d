"""`epochwatch reset-cluster` against the live job on the real broker: the reset cluster's series
leave /metrics, the other cluster's stay."""

from __future__ import annotations

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from streaming.commands import main as epochwatch
from streaming.sinks.kafka import KafkaOutputSink
from streaming.sinks.metrics import Metrics
from streaming.spark.job import start
from streaming.spark.pipeline import PROCESSING_TIME
from streaming.tools.embedded import create_topics
from tests.integration.faults.support import LiveTelemetry, live_settings
from tests.support.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def clusters_on(port: int) -> dict[str, set[str]]:
    """kafka_cluster label -> the metric families that carry it, as Prometheus would scrape them."""
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "kafka_cluster" in sample.labels:
                out.setdefault(sample.labels["kafka_cluster"], set()).add(family.name)
    return out


def test_reset_cluster_drops_its_series_from_the_live_jobs_metrics(broker, spark, tmp_path):
    """Why: reset-cluster is how an operator clears a cluster that forged events made up; the job
    forgot it, but its broker gauges and client counts stayed on /metrics (and on dashboards) for
    as long as the job ran. They go now, when the job reaches the reset record."""
    settings = live_settings(broker.bootstrap_servers, tmp_path)
    k = settings.kafka
    create_topics(broker.bootstrap_servers, {k.events_topic: 2, k.alerts_topic: 1, k.dlq_topic: 1})
    metrics = Metrics()
    port = metrics.serve(0)
    kafka_sink = KafkaOutputSink(settings)
    query = start(spark, settings, [kafka_sink, metrics], time_mode=PROCESSING_TIME,
                  query_name=f"reset-{tmp_path.name[-10:]}")
    kept = LiveTelemetry(broker.bootstrap_servers, k.events_topic, "kept", brokers=[1, 2], clients=2).start()
    forged = LiveTelemetry(broker.bootstrap_servers, k.events_topic, "forged", brokers=[7], clients=2).start()
    try:
        seen = wait_until(lambda: (c := clusters_on(port)).get("forged") and c.get("kept") and c, timeout_s=120,
                          what="both clusters' series on /metrics")
        assert "epochwatch_broker_state" in seen["forged"]
        forged.stop()
        code = epochwatch(["reset-cluster", "--cluster-id", "forged", "--set", f"kafka.bootstrap.servers={k.bootstrap_servers}",
                           "--set", f"kafka.topics.events={k.events_topic}"])
        assert code == 0
        wait_until(lambda: "forged" not in clusters_on(port), timeout_s=60,
                   what="the reset cluster's series gone from /metrics")
        assert clusters_on(port)["kept"] >= {"epochwatch_broker_state", "epochwatch_clients_stale_metadata"}, \
            "the other cluster keeps its series"
    finally:
        forged.stop()
        kept.stop()
        query.stop()
        kafka_sink.close()
        metrics.stop()
