"""A silent cluster with the real Prometheus and Alertmanager: the collector's own metrics tell lost
telemetry from an outage, on a Prometheus that labels everything with a Kubernetes `cluster`.

Two clusters go silent. Cluster A's collector stops (its /metrics goes away): Prometheus raises
EpochwatchCollectorDown{kafka_cluster="A"} from deploy/prometheus/rules and Alertmanager mutes A's
ClusterSilent. Cluster B's collector runs and cannot reach B (reachable 0): nothing mutes B's
ClusterSilent. When each is notified is tested in test_alertmanager_sink.py (the ordering) and
test_deploy_configs.py (the shipped waits); here, that the labels meet across the real parts.
"""

from __future__ import annotations

import time

import pytest
import requests
import yaml

from streaming.collect.collector import RoundReport
from streaming.collect.metrics import CollectorMetrics
from streaming.rules.catalog import RULES, alert_record
from streaming.sinks import AlertmanagerSink
from tests.integration.observability.services import (
    PROMETHEUS_CONFIG,
    collector_down_within_s,
    prometheus_process,
)
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

K8S_CLUSTER = "k8s-eu-1"     # what a Kubernetes Prometheus adds to every alert it sends


def collector_reporting(cluster_id: str, reachable: bool) -> tuple[CollectorMetrics, int]:
    """A collector's /metrics after a round (streaming/collect/metrics.py), served on a free port."""
    metrics = CollectorMetrics()
    report = RoundReport(reachable=reachable, cluster_id=cluster_id, controller_id=None, controller_epoch=None,
                         brokers=0, fenced=0, stopping=0, probes_ok=0, probes=3, scrapes_ok=0, scrapes=0, events=0,
                         seconds=1.5)
    metrics.round_done(report, [], None, time.time())
    return metrics, metrics.serve(0, "127.0.0.1")


def prometheus_config(out, collector_ports: list[int], alertmanager_port: int):
    """deploy/prometheus as shipped (rules and their group intervals), scraping these collectors
    every second, alerting this Alertmanager, with a Kubernetes external label `cluster`."""
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s", external_labels={"cluster": K8S_CLUSTER})
    config["rule_files"] = [str(PROMETHEUS_CONFIG.parent / pattern) for pattern in config["rule_files"]]
    config["alerting"]["alertmanagers"][0]["static_configs"] = [{"targets": [f"127.0.0.1:{alertmanager_port}"]}]
    config["scrape_configs"] = [{"job_name": "epochwatch-collector", "scrape_interval": "1s",
                                 "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in collector_ports]}]}]
    out.write_text(yaml.safe_dump(config, sort_keys=False))
    return out


def silent(cluster_id: str) -> dict:
    """ClusterSilent as the rules emit it."""
    now = int(time.time() * 1000)
    return alert_record(RULES["ClusterSilent"], cluster_id, (), "firing", now, now, "no heartbeat")


def in_alertmanager(alertmanager, alertname: str, kafka_cluster: str) -> dict | None:
    return next((a for a in requests.get(alertmanager.url + "/api/v2/alerts", timeout=5).json()
                 if a["labels"]["alertname"] == alertname and a["labels"].get("kafka_cluster") == kafka_cluster), None)


def prometheus_alert_state(prometheus, alertname: str) -> str | None:
    alerts = requests.get(prometheus.url + "/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    return next((a["state"] for a in alerts if a["labels"]["alertname"] == alertname), None)


def test_a_stopped_collector_mutes_its_clusters_silence_and_an_unreachable_cluster_pages(tmp_path, alertmanager):
    collector_a, port_a = collector_reporting("cluster-a", reachable=True)
    collector_b, port_b = collector_reporting("cluster-b", reachable=False)
    prometheus = prometheus_process(tmp_path, prometheus_config(tmp_path / "prometheus.yml", [port_a, port_b],
                                                                alertmanager.port)).start(timeout_s=60)
    sink = AlertmanagerSink(alertmanager.url, timeout_s=2, backoff_max_s=1)
    try:
        def scraped() -> bool:
            body = requests.get(prometheus.url + "/api/v1/query", timeout=5,
                                params={"query": "count(epochwatch_collector_up == 1)"}).json()
            return bool(body["data"]["result"]) and body["data"]["result"][0]["value"][1] == "2"

        wait_until(scraped, timeout_s=30, what="both collectors scraped")
        collector_a.stop()
        stopped = time.monotonic()
        sink.add([silent("cluster-a"), silent("cluster-b")])   # the job: both clusters went silent
        sink.flush()
        wait_until(lambda: prometheus_alert_state(prometheus, "EpochwatchCollectorDown") == "firing",
                   timeout_s=40, interval_s=0.2, what="EpochwatchCollectorDown firing in Prometheus")
        firing_after_s = time.monotonic() - stopped
        assert firing_after_s <= collector_down_within_s(), firing_after_s

        def muted():
            down = in_alertmanager(alertmanager, "EpochwatchCollectorDown", "cluster-a")
            a = in_alertmanager(alertmanager, "ClusterSilent", "cluster-a")
            b = in_alertmanager(alertmanager, "ClusterSilent", "cluster-b")
            return down and a and b and a["status"]["inhibitedBy"] and (down, a, b)

        down, a, b = wait_until(muted, timeout_s=30, what="cluster-a's ClusterSilent muted")
        assert down["labels"]["cluster"] == K8S_CLUSTER and down["labels"]["kafka_cluster"] == "cluster-a"
        assert a["status"]["inhibitedBy"] == [down["fingerprint"]]
        assert (b["status"]["state"], b["status"]["inhibitedBy"]) == ("active", [])
        assert in_alertmanager(alertmanager, "EpochwatchCollectorDown", "cluster-b") is None
    finally:
        sink.close(timeout_s=5)
        prometheus.stop()
        collector_a.stop()
        collector_b.stop()
