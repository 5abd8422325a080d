"""The real Prometheus scrapes streaming.sinks.metrics and evaluates deploy/prometheus/rules."""

from __future__ import annotations

import time

import pytest
import requests

from tests.support.polling import wait_until

pytestmark = pytest.mark.integration


def query(prometheus, promql: str) -> list[dict]:
    body = requests.get(prometheus.url + "/api/v1/query", params={"query": promql}, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def alert_states(prometheus) -> dict[str, str]:
    body = requests.get(prometheus.url + "/api/v1/alerts", timeout=5).json()
    return {a["labels"]["alertname"]: a["state"] for a in body["data"]["alerts"]}


def rules_loaded(prometheus) -> set[str]:
    groups = requests.get(prometheus.url + "/api/v1/rules", timeout=5).json()["data"]["groups"]
    return {rule["name"] for g in groups for rule in g["rules"]}


def healthy_job(metrics) -> None:
    metrics.observe_broker_status([{"cluster_id": "c1", "broker_id": 2, "state": "ACTIVE", "incarnation_id": 17,
                                    "metadata_epoch": 40, "metadata_epoch_lag": 0, "restarts": 1}])
    metrics.batch_finished(time.time())


def test_scrapes_the_job_and_loads_the_meta_rules(prometheus, metrics_server):
    metrics, port = metrics_server
    healthy_job(metrics)
    up = wait_until(lambda: query(prometheus, 'epochwatch_up{job="epochwatch"} == 1'), timeout_s=30,
                    what="epochwatch_up scraped")
    assert up[0]["metric"]["instance"] == f"127.0.0.1:{port}"
    state = wait_until(lambda: query(prometheus, 'epochwatch_broker_state{kafka_cluster="c1", broker_id="2"} == 1'),
                       timeout_s=30, what="broker state scraped")
    assert [s["metric"]["state"] for s in state] == ["ACTIVE"]
    assert rules_loaded(prometheus) == {"EpochwatchDown", "EpochwatchStalled", "EpochwatchFallingBehind",
                                        "EpochwatchDeadLetters", "EpochwatchAlertDeliveryBacklog",
                                        "EpochwatchCollectorDown", "EpochwatchSourceDataLoss"}
    # a healthy job: after several evaluations nothing is pending
    wait_until(lambda: query(prometheus, 'count_over_time(epochwatch_up{job="epochwatch"}[1m]) >= 3'), timeout_s=30,
               what="three scrapes")
    assert alert_states(prometheus) == {}


def test_stalled_batches_raise_the_stall_alert(prometheus, metrics_server):
    metrics, _ = metrics_server
    healthy_job(metrics)
    wait_until(lambda: query(prometheus, 'epochwatch_up{job="epochwatch"} == 1'), timeout_s=30, what="scraped")
    metrics.batch_finished(time.time() - 600)     # the clock is injected: the last batch finished 10 min ago
    wait_until(lambda: alert_states(prometheus).get("EpochwatchStalled") in ("pending", "firing"), timeout_s=30,
               what="EpochwatchStalled pending")


def test_a_dead_monitor_raises_the_down_alert(prometheus, metrics_server):
    metrics, _ = metrics_server
    healthy_job(metrics)
    wait_until(lambda: query(prometheus, 'epochwatch_up{job="epochwatch"} == 1'), timeout_s=30, what="scraped")
    metrics.stop()                                 # the driver's metrics endpoint is gone
    wait_until(lambda: query(prometheus, 'up{job="epochwatch"} == 0'), timeout_s=30, what="scrape failing")
    wait_until(lambda: alert_states(prometheus).get("EpochwatchDown") in ("pending", "firing"), timeout_s=30,
               what="EpochwatchDown pending")
