"""AlertmanagerSink against the real Alertmanager, routed by deploy/alertmanager/alertmanager.yml."""

from __future__ import annotations

import hashlib
import signal
import time

import pytest
import requests
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streaming.sinks import AlertmanagerSink, latest_alert_states
from streaming.sinks.labels import alert_labels
from streaming.sinks.metrics import Metrics
from tests.integration.observability.services import alertmanager_process, collector_down_within_s
from tests.support.polling import wait_until

pytestmark = pytest.mark.integration

# add+flush only touch memory under a lock: 0.5 s is room for a stalled thread on a loaded host, and
# still well under the 2 s a call that waited on the hanging Alertmanager's HTTP timeout would take.
CALL_BOUND_S = 0.5

SEVERITY = {"ClusterSilent": "critical", "BrokerMetadataLag": "critical", "MetadataEpochRegression": "critical",
            "BrokerHeartbeatTimeout": "warning", "ClientRebootstrapOverdue": "warning", "BrokerRestarted": "info", "ControllerFailover": "info"}


def now_ms() -> int:
    return int(time.time() * 1000)


def firing(alertname: str, cluster: str, starts_at: int | None = None, **entity) -> dict:
    """An alert record as the rules emit it (the cluster id in `cluster`; the sink labels it)."""
    severity = SEVERITY[alertname]
    labels = {"alertname": alertname, "cluster": cluster, "severity": severity, **{k: str(v) for k, v in entity.items()}}
    starts_at = starts_at or now_ms()
    fp = hashlib.sha256(repr((sorted(labels.items()), starts_at)).encode()).hexdigest()[:16]
    return {"event_type": "alert", "event_id": f"{fp}:firing", "cluster_id": cluster, "event_time": starts_at,
            "alertname": alertname, "severity": severity, "status": "firing", "labels": labels,
            "annotations": {"summary": f"{alertname} in {cluster}", "description": f"{alertname} {entity}",
                            "runbook_url": f"docs/alerts.md#{alertname.lower()}"},
            "starts_at": starts_at, "ends_at": None, "fingerprint": fp}


def resolution(record: dict, ends_at: int | None = None) -> dict:
    ends_at = ends_at or now_ms()
    return {**record, "status": "resolved", "event_id": f"{record['fingerprint']}:resolved", "event_time": ends_at,
            "ends_at": ends_at}


def active_alerts(am) -> list[dict]:
    return requests.get(am.url + "/api/v2/alerts", timeout=5).json()


def webhook_notifications_done(am) -> float:
    """Webhook notifications Alertmanager has finished (answered), from its own /metrics."""
    text = requests.get(f"{am.url}/metrics", timeout=5).text
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "alertmanager_notification_latency_seconds_count"
               and s.labels.get("integration") == "webhook")


def find(am, record: dict) -> dict | None:
    """The Alertmanager alert of a record sent with the default sinks.labels."""
    for alert in active_alerts(am):
        if alert["labels"] == alert_labels(record):
            return alert
    return None


@pytest.fixture
def sink_factory(alertmanager):
    sinks = []

    def make(**kwargs) -> AlertmanagerSink:
        kwargs.setdefault("resend_interval_s", 30)
        kwargs.setdefault("timeout_s", 2)
        kwargs.setdefault("backoff_max_s", 1)
        sink = AlertmanagerSink(kwargs.pop("url", alertmanager.url), **kwargs)
        sinks.append(sink)
        return sink

    yield make
    for sink in sinks:
        sink.close(timeout_s=5)


def test_fire_is_visible_with_labels_and_annotations(alertmanager, sink_factory):
    sink = sink_factory(generator_url="http://127.0.0.1:9464/metrics")
    lag = firing("BrokerMetadataLag", "c1", broker_id=3)
    sink.add([lag])
    sink.flush()
    alert = wait_until(lambda: find(alertmanager, lag), timeout_s=10, what="the alert on Alertmanager")
    assert alert["annotations"] == lag["annotations"]
    assert alert["labels"] == {"alertname": "BrokerMetadataLag", "kafka_cluster": "c1", "severity": "critical",
                               "broker_id": "3"}
    assert alert["status"]["state"] == "active"
    assert alert["generatorURL"] == "http://127.0.0.1:9464/metrics"
    assert [r["name"] for r in alert["receivers"]] == ["pager"]
    wait_until(lambda: sink.backlog == 0, timeout_s=5, what="backlog 0")


def test_only_critical_alerts_page(alertmanager, webhook, sink_factory):
    sink = sink_factory()
    critical = firing("ClusterSilent", "c7")
    warning = firing("ClientRebootstrapOverdue", "c7", client_id="app-1")
    info = firing("ControllerFailover", "c7", controller_id=2, controller_epoch=9)
    sink.add([critical, warning, info])
    sink.flush()
    wait_until(lambda: len(webhook.alerts("/team")) >= 2 and webhook.alerts("/pager"), timeout_s=15,
               what="notifications on both receivers")
    assert [labels["alertname"] for _, labels in webhook.alerts("/pager")] == ["ClusterSilent"]
    assert sorted(labels["alertname"] for _, labels in webhook.alerts("/team")) == ["ClientRebootstrapOverdue",
                                                                                   "ControllerFailover"]


def test_active_alerts_are_re_sent(alertmanager, sink_factory):
    sink = sink_factory(resend_interval_s=1)
    timeout = firing("BrokerHeartbeatTimeout", "c1", broker_id=1)
    sink.add([timeout])
    sink.flush()
    first = wait_until(lambda: find(alertmanager, timeout), timeout_s=10, what="the alert on Alertmanager")
    later = wait_until(lambda: (a := find(alertmanager, timeout)) and a["updatedAt"] > first["updatedAt"] and a,
                       timeout_s=10, what="a re-send moving updatedAt")
    assert later["endsAt"] > first["endsAt"]          # each re-send pushes the expiry forward
    assert later["startsAt"] == first["startsAt"]     # same incident


def test_resolution_removes_the_alert_and_notifies(alertmanager, webhook, sink_factory):
    sink = sink_factory()
    lag = firing("BrokerMetadataLag", "c2", broker_id=4)
    sink.add([lag])
    sink.flush()
    wait_until(lambda: ("firing", alert_labels(lag)) in webhook.alerts("/pager"), timeout_s=15, what="firing page")
    sink.add([resolution(lag)])
    sink.flush()
    wait_until(lambda: find(alertmanager, lag) is None, timeout_s=10, what="alert no longer active")
    wait_until(lambda: ("resolved", alert_labels(lag)) in webhook.alerts("/pager"), timeout_s=15,
               what="resolved page")


def test_groups_by_kafka_cluster_and_alertname(alertmanager, sink_factory):
    sink = sink_factory()
    sink.add([firing("BrokerHeartbeatTimeout", "c1", broker_id=1), firing("BrokerHeartbeatTimeout", "c1", broker_id=2),
              firing("BrokerHeartbeatTimeout", "c2", broker_id=1),
              firing("ClientRebootstrapOverdue", "c1", client_id="app")])
    sink.flush()

    def groups():
        found = {}
        for group in requests.get(alertmanager.url + "/api/v2/alerts/groups", timeout=5).json():
            found[(group["labels"].get("kafka_cluster"), group["labels"].get("alertname"))] = len(group["alerts"])
        return found

    expected = {("c1", "BrokerHeartbeatTimeout"): 2, ("c2", "BrokerHeartbeatTimeout"): 1,
                ("c1", "ClientRebootstrapOverdue"): 1}
    wait_until(lambda: groups() == expected, timeout_s=10, what=f"groups {expected}")
    for group in requests.get(alertmanager.url + "/api/v2/alerts/groups", timeout=5).json():
        assert set(group["labels"]) == {"kafka_cluster", "alertname"}


def test_inhibition(alertmanager, sink_factory):
    sink = sink_factory()
    silent = firing("ClusterSilent", "c1")
    timeout_c1 = firing("BrokerHeartbeatTimeout", "c1", broker_id=1)
    timeout_c2 = firing("BrokerHeartbeatTimeout", "c2", broker_id=1)
    lag_c3 = firing("BrokerMetadataLag", "c3", broker_id=5)                 # critical of broker 5 ...
    timeout_c3 = firing("BrokerHeartbeatTimeout", "c3", broker_id=5)        # ... hides its warning
    other_broker_c3 = firing("BrokerHeartbeatTimeout", "c3", broker_id=6)   # but not another broker's
    regression_c4 = firing("MetadataEpochRegression", "c4", controller_id=1)  # cluster-level critical ...
    client_c4 = firing("ClientRebootstrapOverdue", "c4", client_id="app")    # ... must not hide client warnings
    records = [silent, timeout_c1, timeout_c2, lag_c3, timeout_c3, other_broker_c3, regression_c4, client_c4]
    sink.add(records)
    sink.flush()

    def inhibited_by():
        by_labels = {tuple(sorted(a["labels"].items())): a["status"]["inhibitedBy"] for a in active_alerts(alertmanager)}
        return [by_labels.get(tuple(sorted(alert_labels(r).items()))) for r in records]

    def settled():
        got = inhibited_by()
        return None not in got and bool(got[1]) and bool(got[4]) and got

    got = wait_until(settled, timeout_s=15, what="inhibition computed")
    silent_fp = find(alertmanager, silent)["fingerprint"]
    lag_fp = find(alertmanager, lag_c3)["fingerprint"]
    assert got == [[], [silent_fp], [], [], [lag_fp], [], [], []]


def collector_down(kafka_cluster: str) -> dict:
    """EpochwatchCollectorDown as Prometheus posts it (deploy/prometheus/rules: `max by
    (kafka_cluster)`, plus the external labels of a Kubernetes Prometheus)."""
    return {"labels": {"alertname": "EpochwatchCollectorDown", "kafka_cluster": kafka_cluster,
                       "severity": "critical", "cluster": "k8s-eu-1", "prometheus": "monitoring/k8s"},
            "annotations": {"summary": f"epochwatch collect for Kafka cluster {kafka_cluster} has stopped"}}


def test_lost_telemetry_is_muted_before_it_pages_and_an_outage_pages(alertmanager, webhook, sink_factory):
    """Two clusters go silent. k1's collector stopped: lost telemetry, Prometheus raises
    EpochwatchCollectorDown for k1 some seconds after the job raised ClusterSilent (as it does:
    deploy/alertmanager explains the times), and k1's ClusterSilent and Broker* alerts must never
    page. k2's collector runs and cannot reach k2 (no EpochwatchCollectorDown): an outage, it pages.
    The Kubernetes `cluster` label Prometheus adds is no Kafka cluster: it relates nothing."""
    sink = sink_factory()
    silent_k1, silent_k2 = firing("ClusterSilent", "k1"), firing("ClusterSilent", "k2")
    lag_k1 = firing("BrokerMetadataLag", "k1", broker_id=1)
    raised = time.monotonic()
    sink.add([silent_k1, silent_k2, lag_k1])
    sink.flush()
    wait_until(lambda: find(alertmanager, silent_k1) and find(alertmanager, silent_k2) and find(alertmanager, lag_k1),
               timeout_s=10, what="the job's alerts in Alertmanager")
    # Prometheus is late by up to this (the rendered config's waits are a tenth of the shipped
    # ones, so is this delay): not a wait for a condition, the time the inhibition must win against.
    # Counted from when the job raised the alerts, as Prometheus's lateness is: the polling above
    # must not eat the 1 s by which ClusterSilent's group_wait is longer.
    time.sleep(max(0.0, raised + collector_down_within_s() / 10 - time.monotonic()))
    down = collector_down("k1")
    requests.post(alertmanager.url + "/api/v2/alerts", json=[down], timeout=5).raise_for_status()

    def paged(record_labels: dict) -> bool:
        return ("firing", record_labels) in webhook.alerts("/pager")

    wait_until(lambda: paged(alert_labels(silent_k2)) and any(labels["alertname"] == "EpochwatchCollectorDown"
                                                              for _, labels in webhook.alerts("/pager")),
               timeout_s=20, what="k2's ClusterSilent and k1's EpochwatchCollectorDown paged")
    down_fp = next(a["fingerprint"] for a in active_alerts(alertmanager)
                   if a["labels"]["alertname"] == "EpochwatchCollectorDown")
    k1, k2, lag = find(alertmanager, silent_k1), find(alertmanager, silent_k2), find(alertmanager, lag_k1)
    assert k1["status"]["inhibitedBy"] == [down_fp] and k1["status"]["state"] == "suppressed"
    assert down_fp in lag["status"]["inhibitedBy"]
    assert k2["status"]["inhibitedBy"] == [] and k2["status"]["state"] == "active"
    assert not paged(alert_labels(silent_k1)) and not paged(alert_labels(lag_k1)), webhook.alerts("/pager")


def test_epochwatchs_inhibitions_leave_other_teams_alerts_alone(alertmanager, sink_factory):
    """A shared Alertmanager holds other teams' alerts, with names that may match epochwatch's
    rules and without kafka_cluster (a label missing on both sides counts as equal)."""
    foreign = [{"labels": {"alertname": "ClusterSilent", "severity": "critical", "team": "search"}},
               {"labels": {"alertname": "BrokerDown", "severity": "warning", "team": "rabbitmq"}},
               {"labels": {"alertname": "EpochwatchCollectorDown", "severity": "critical", "team": "search"}}]
    requests.post(alertmanager.url + "/api/v2/alerts", json=foreign, timeout=5).raise_for_status()
    sink = sink_factory()
    ours = firing("BrokerHeartbeatTimeout", "k3", broker_id=1)
    sink.add([ours])
    sink.flush()

    def inhibitions():
        found = {(a["labels"]["alertname"], a["labels"].get("team")): a["status"]["inhibitedBy"]
                 for a in active_alerts(alertmanager)}
        return len(found) == 4 and found

    got = wait_until(inhibitions, timeout_s=10, what="all four alerts in Alertmanager")
    assert got == {("ClusterSilent", "search"): [], ("BrokerDown", "rabbitmq"): [],
                   ("EpochwatchCollectorDown", "search"): [], ("BrokerHeartbeatTimeout", None): []}


def scrape(metrics: Metrics) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(generate_latest(metrics.registry).decode())
            for s in f.samples if s.name.startswith("epochwatch_alertmanager")}


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_outage_then_recovery_loses_nothing(alertmanager, webhook, sink_factory, tmp_path, stop_signal):
    metrics = Metrics()
    sink = sink_factory(metrics=metrics, timeout_s=1)
    lag = firing("BrokerMetadataLag", "c5", broker_id=1)
    sink.add([lag])
    sink.flush()
    wait_until(lambda: ("firing", alert_labels(lag)) in webhook.alerts("/pager"), timeout_s=15, what="first page")
    # The webhook has the request before Alertmanager has the answer and logs the notification
    # (its nflog, which a stopped Alertmanager keeps): stopping in between loses that log.
    wait_until(lambda: webhook_notifications_done(alertmanager) >= 1, timeout_s=15,
               what="Alertmanager to finish the first notification")

    alertmanager.stop(stop_signal)
    silent = firing("ClusterSilent", "c6")
    timeout = firing("BrokerHeartbeatTimeout", "c5", broker_id=2)
    calls = []
    for batch in ([resolution(lag)], [silent], [timeout], []):
        started = time.perf_counter()
        sink.add(batch)
        sink.flush()
        calls.append(time.perf_counter() - started)
    wait_until(lambda: scrape(metrics)["epochwatch_alertmanager_delivery_failures_total"] >= 2, timeout_s=15,
               what="failed deliveries counted")
    assert scrape(metrics)["epochwatch_alertmanager_backlog"] == 3
    for _ in range(20):   # the job keeps calling while Alertmanager is away
        started = time.perf_counter()
        sink.add([timeout])
        sink.flush()
        calls.append(time.perf_counter() - started)
    assert max(calls) < CALL_BOUND_S, f"add+flush took up to {max(calls) * 1000:.1f} ms while Alertmanager was down"

    restarted = alertmanager_process(tmp_path, alertmanager.argv[1].split("=", 1)[1], port=alertmanager.port).start()
    try:
        wait_until(lambda: scrape(metrics)["epochwatch_alertmanager_backlog"] == 0, timeout_s=15, what="backlog drained")
        assert find(restarted, silent) is not None and find(restarted, timeout) is not None
        assert find(restarted, lag) is None
        wait_until(lambda: ("firing", alert_labels(silent)) in webhook.alerts("/pager")
                   and ("firing", alert_labels(timeout)) in webhook.alerts("/team"),
                   timeout_s=15, what="the alerts raised during the outage notified after recovery")
        if stop_signal == signal.SIGTERM:
            # A stopped Alertmanager kept its notification log, so it knows it paged `lag` and now
            # pages its resolution. (A killed one lost that log: it accepts the resolution but,
            # never having paged it, correctly stays quiet.)
            wait_until(lambda: ("resolved", alert_labels(lag)) in webhook.alerts("/pager"), timeout_s=15,
                       what="the resolution sent during the outage paged after recovery")
    finally:
        restarted.stop()


def test_invalid_alert_is_refused_alone(alertmanager, sink_factory):
    metrics = Metrics()
    sink = sink_factory(metrics=metrics)
    bad = firing("BrokerHeartbeatTimeout", "c8", broker_id=1)
    bad["labels"]["bad-label"] = "x"                  # not a Prometheus label name: Alertmanager says 400
    good = firing("BrokerHeartbeatTimeout", "c8", broker_id=2)
    sink.add([bad, good])
    sink.flush()
    wait_until(lambda: sink.backlog == 0, timeout_s=10, what="backlog drained")
    assert find(alertmanager, good) is not None
    assert scrape(metrics)["epochwatch_alertmanager_delivery_failures_total"] >= 1


def test_restart_rebuilds_the_active_set_from_the_alerts_topic(alertmanager, sink_factory):
    before = sink_factory()
    kept, ended = firing("BrokerHeartbeatTimeout", "c9", broker_id=1), firing("BrokerHeartbeatTimeout", "c9", broker_id=2)
    before.add([kept, ended])
    before.flush()
    wait_until(lambda: find(alertmanager, kept) and find(alertmanager, ended), timeout_s=10, what="both alerts")
    before.close()
    # The driver died after writing the resolution to Kafka but before delivering it.
    topic = [kept, ended, resolution(ended)]
    after = sink_factory()
    after.seed(latest_alert_states(topic).values())
    after.flush()
    wait_until(lambda: find(alertmanager, ended) is None, timeout_s=10, what="resolution delivered after restart")
    assert find(alertmanager, kept) is not None


def test_a_hanging_alertmanager_never_blocks_the_job():
    import socket

    metrics = Metrics()
    with socket.socket() as hanging:          # accepts TCP connections, never answers HTTP
        hanging.bind(("127.0.0.1", 0))
        hanging.listen(16)
        sink = AlertmanagerSink(f"http://127.0.0.1:{hanging.getsockname()[1]}", timeout_s=2, backoff_max_s=1,
                                metrics=metrics)
        try:
            calls = []
            for i in range(50):
                started = time.perf_counter()
                sink.add([firing("BrokerHeartbeatTimeout", "c1", broker_id=i)])
                sink.flush()
                calls.append(time.perf_counter() - started)
            wait_until(lambda: scrape(metrics)["epochwatch_alertmanager_delivery_failures_total"] >= 1, timeout_s=10,
                       what="a timed-out delivery counted")
            assert max(calls) < CALL_BOUND_S, f"add+flush took up to {max(calls) * 1000:.1f} ms"
            assert scrape(metrics)["epochwatch_alertmanager_backlog"] == 50
        finally:
            sink.close(timeout_s=3)
